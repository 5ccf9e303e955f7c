-- includes/end_attempt.lua: end one attempt (set_result.lua, report_and_claim.lua).
--
-- Needs "keys", "policy", "snapshot" and "common" included before it.

-- End the attempt `lease_id` of job `id` (hash `key`, result string
-- `result_key`) with `status`. Returns 1 when applied, 0 for a repeat of the
-- same lease and outcome (nothing changed), or a negative RC: JOB_NOT_FOUND,
-- LEASE_LOST, JOB_CANCELLED (nothing changed).
local function end_attempt(key, result_key, id, lease_id, status, result, content_type,
                           error_code, error_message, retryable, backoff_base, backoff_cap)
  -- what was asked, to recognise a repeat after a lost answer
  local outcome = table.concat(
    {status, retryable and '1' or '0', error_code, redis.sha1hex(result)}, '|')
  local f = redis.call('HMGET', key, 'status', 'lease_id', 'outcome', 'attempts',
    'cancel_requested')
  if not f[1] then
    return RC.JOB_NOT_FOUND
  end
  if f[2] ~= lease_id then
    return RC.LEASE_LOST
  end
  if f[1] == ST.CANCELLED and f[5] == '1' then
    return RC.JOB_CANCELLED
  end
  if f[1] ~= ST.PROCESSING then
    if f[3] == outcome then
      return 0
    end
    return RC.LEASE_LOST
  end
  oom_guard(key)
  redis.call('HSET', key, 'outcome', outcome)
  if status == ST.COMPLETED then
    if result ~= '' then
      redis.call('SET', result_key, result)
    end
    redis.call('HSET', key, 'result_content_type', content_type, 'progress', '1')
    finish(id, ST.COMPLETED, '', '')
  elseif retryable then
    retry_or_exhaust(id, error_code, error_message,
      backoff_ms(tonumber(f[4]), backoff_base, backoff_cap))
  else
    finish(id, ST.FAILED, error_code, error_message)
  end
  return 1
end
