-- includes/end_attempt.lua: end one attempt (set_result.lua, report_and_claim.lua).
--
-- Needs "policy", "declared", "snapshot", "common" and "plan" included before it.

-- What was asked, to recognise a repeat after a lost answer.
local function attempt_outcome(status, retryable, error_code, result)
  return table.concat({status, retryable and '1' or '0', error_code, redis.sha1hex(result)}, '|')
end

-- The checks of ending the attempt `lease_id` of job `id` (reads only):
-- nil when it applies (then plan_transition(id) was called, so its keys are
-- asked for), else 0 for a repeat of the same lease and outcome (nothing
-- changes) or a negative RC: JOB_NOT_FOUND, LEASE_LOST, JOB_CANCELLED.
local function end_attempt_check(id, lease_id, outcome)
  local f = redis.call('HMGET', jk(id), 'status', 'lease_id', 'outcome', 'cancel_requested')
  if not f[1] then
    return RC.JOB_NOT_FOUND
  end
  -- store/policy.py result_verdict, as the table it generated
  local verdict = RESULT_VERDICT[f[1] .. '|' .. flags(f[2] == lease_id, f[4] == '1',
    f[3] == outcome)]
  if verdict == VERDICT.LEASE_LOST then
    return RC.LEASE_LOST
  elseif verdict == VERDICT.JOB_CANCELLED then
    return RC.JOB_CANCELLED
  elseif verdict == VERDICT.REPEAT then
    plan_snapshot(id)
    return 0
  end
  plan_transition(id)
  return nil
end

-- End the attempt (after end_attempt_check answered nil and every key
-- its plan asked for is declared) with `status`.
local function end_attempt(id, outcome, status, result, content_type, error_code,
                           error_message, retryable, backoff_base, backoff_cap)
  local key = jk(id)
  oom_guard(key)
  local attempts = redis.call('HGET', key, 'attempts')
  redis.call('HSET', key, 'outcome', outcome)
  if status == ST.COMPLETED then
    if result ~= '' then
      redis.call('SET', result_key(id), result)
    end
    redis.call('HSET', key, 'result_content_type', content_type, 'progress', '1')
    finish(id, ST.COMPLETED, '', '')
  elseif retryable then
    retry_or_exhaust(id, error_code, error_message,
      backoff_ms(tonumber(attempts), backoff_base, backoff_cap))
  else
    finish(id, ST.FAILED, error_code, error_message)
  end
end
