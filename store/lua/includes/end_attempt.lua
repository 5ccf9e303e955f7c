-- includes/end_attempt.lua: end one attempt (set_result.lua, report_and_claim.lua).
--
-- Needs "policy", "declared", "snapshot", "common" and "plan" included before it.

-- What was asked, to recognise a repeat after a lost answer.
local function attempt_outcome(status, retryable, error_code, result)
  return table.concat({status, retryable and '1' or '0', error_code, redis.sha1hex(result)}, '|')
end

-- The checks of ending the attempt `lease_id` of job `id` (reads only; one
-- HMGET): nil and the job's fields when it applies (then plan_transition
-- was called, so its keys are asked for), else 1 when call `op` applied it
-- already (a resend after a lost reply: the record keeps the op id that
-- ended it), 0 for a repeat of the same lease and outcome (nothing changes)
-- or a negative RC: JOB_NOT_FOUND, LEASE_LOST, JOB_CANCELLED.
local function end_attempt_check(id, lease_id, outcome, op)
  local j = plan_read(id)
  if not j then
    return RC.JOB_NOT_FOUND
  end
  if op and j.op == op then
    plan_snapshot(id)
    return 1
  end
  -- store/policy.py result_verdict, as the table it generated
  local verdict = RESULT_VERDICT[j.status .. '|' .. flags(j.lease_id == lease_id,
    j.cancel_requested == '1', j.outcome == outcome)]
  if verdict == VERDICT.LEASE_LOST then
    return RC.LEASE_LOST
  elseif verdict == VERDICT.JOB_CANCELLED then
    return RC.JOB_CANCELLED
  elseif verdict == VERDICT.REPEAT then
    plan_snapshot(id)
    return 0
  end
  plan_transition(id, j)
  return nil, j
end

-- End the attempt (after end_attempt_check answered nil and the job's
-- fields `j`, and every key its plan asked for is declared) with `status`,
-- for call `op`: the record keeps the outcome and the op id in the HSET
-- that ends the attempt.
local function end_attempt(id, j, op, outcome, status, result, content_type, error_code,
                           error_message, retryable, backoff_base, backoff_cap)
  local key = jk(id)
  local ended = {'outcome', outcome, 'op', op}
  if status == ST.COMPLETED then
    local single = j.kind == KIND.SINGLE
    if result ~= '' then
      if single then  -- a child's result expires with its group
        redis.call('SET', result_key(id), result, 'PX', RESULT_TTL_PX)
      else
        redis.call('SET', result_key(id), result)
      end
    end
    ended[#ended + 1] = 'result_content_type'
    ended[#ended + 1] = content_type
    ended[#ended + 1] = 'progress'
    ended[#ended + 1] = '1'
    finish(id, ST.COMPLETED, '', '', ended, not single and result ~= '', j)
  elseif retryable then
    retry_or_exhaust(id, error_code, error_message,
      backoff_ms(tonumber(j.attempts), backoff_base, backoff_cap), ended)
  else
    finish(id, ST.FAILED, error_code, error_message, ended, false, j)
  end
end
