-- includes/recover.lua: the recovery scripts' loop over due ids.
--
-- Needs "policy", "declared", "common" and "plan" included before it.
--
-- Due ids come from an index (ZRANGEBYSCORE ... LIMIT), so the caller cannot
-- declare them beforehand. Each id's recovery is a complete transition, so a
-- recovery script handles due ids in order while their plans' keys are
-- declared, and stops before the first whose are not, asking for the keys of
-- every id left; the caller calls again with them declared.
--
-- Every recovery script takes the same input first (its header points here):
--   KEYS[1..10]  the transition keys (see includes/common.lua)
--   KEYS[11..]   the declared job and model groups and raw keys
--                (includes/declared.lua): the due ids and what their plans
--                ask for, once asked for
--   ARGV[1..4]   ready channel, changes channel, events_max_length, result_ttl_ms
--                (common.lua)
--   ARGV[5]      limit: at most this many due ids per call

-- The first `limit` ids due by now in the index `due_key` (oldest deadline first).
local function due_ids(due_key, limit)
  return redis.call('ZRANGEBYSCORE', due_key, '-inf', NOW, 'LIMIT', 0, limit)
end

-- Handles `ids` in order: plan_item(id) asks for its keys (plan_*), then
-- handle(id) writes. Returns how many were handled.
local function handle_due(ids, plan_item, handle)
  for i, id in ipairs(ids) do
    plan_reset()
    plan_item(id)
    plan_groups()
    if needs_count() > 0 then
      for j = i + 1, #ids do
        plan_reset()
        plan_item(ids[j])
        plan_groups()
      end
      return i - 1
    end
    handle(id)
  end
  return #ids
end

-- Recovery of PROCESSING attempts whose deadline in `due_key` (leases or
-- run_deadlines) passed: each is a failed attempt, requeued after
-- delay_of(attempts) or exhausted. `other_key` is the attempt's other
-- deadline index, cleared when the record is gone (an orphan is dropped,
-- never recreated). Returns how many ids it handled.
local function fail_due_attempts(due_key, other_key, limit, error_code, message_of, delay_of)
  return handle_due(due_ids(due_key, limit), plan_transition, function(id)
    redis.call('ZREM', due_key, id)
    local f = redis.call('HMGET', jk(id), 'status', 'attempts')
    if not f[1] then
      redis.call('ZREM', other_key, id)
    elseif f[1] == ST.PROCESSING then
      retry_or_exhaust(id, error_code, message_of(f[2]), delay_of(tonumber(f[2])))
    end
  end)
end

-- The reply of recover scripts: items handled, the events emitted, and the
-- keys asked for ({ids, models, raw keys}, all empty when it did not stop).
local function recover_reply(handled)
  return {handled, EMITTED, needs()}
end
