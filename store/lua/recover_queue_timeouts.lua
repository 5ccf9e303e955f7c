--[[
  Jobs QUEUED longer than their queue_timeout (counted from when they last
  became QUEUED) end FAILED with error_code QUEUE_TIMEOUT.

  Input:
    KEYS[1..], ARGV[1..5]  the recovery input (includes/recover.lua): transition
                           keys, declared job and model groups, ARGV[5] the limit

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

local handled = handle_due(due_ids(K_QTIMEOUTS, tonumber(ARGV[5])), plan_transition, function(id)
  redis.call('ZREM', K_QTIMEOUTS, id)
  if redis.call('HGET', jk(id), 'status') == ST.QUEUED then
    finish(id, ST.FAILED, ERR.QUEUE_TIMEOUT, MSG_QUEUE_TIMEOUT)
  end
end)
return recover_reply(handled)
