--[[
  Jobs QUEUED longer than their queue_timeout (counted from when they last
  became QUEUED) end FAILED with error_code QUEUE_TIMEOUT.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11..]   the declared job and model groups and raw keys
                 (includes/declared.lua): the due ids and what their plans
                 ask for, once asked for (includes/recover.lua)
    ARGV[1..4]   ready channel, changes channel, events_max_length, result_ttl_ms
                 (common.lua)
    ARGV[5]      limit

  Reads only what is due (ZRANGEBYSCORE queue_timeouts -inf now LIMIT).

  Output:
    {handled, events, needed}  (as recover_leases)

  Transitions: QUEUED -> FAILED (QUEUE_TIMEOUT), with the group steps of a
  child's end.
]]
--- @include "policy"
--- @include "declared"
--- @include "common"
--- @include "plan"
--- @include "recover"

local ids = redis.call('ZRANGEBYSCORE', K_QTIMEOUTS, '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[5]))
local handled = handle_due(ids, plan_transition, function(id)
  redis.call('ZREM', K_QTIMEOUTS, id)
  if redis.call('HGET', jk(id), 'status') == ST.QUEUED then
    finish(id, ST.FAILED, ERR.QUEUE_TIMEOUT, MSG_QUEUE_TIMEOUT)
  end
end)
return recover_reply(handled)
