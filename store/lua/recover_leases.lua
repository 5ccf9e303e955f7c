--[[
  Expired leases: requeue at the original place, or end FAILED past max_attempts.

  Input:
    KEYS[1..], ARGV[1..5]  the recovery input (includes/recover.lua): transition
                           keys, declared job and model groups, ARGV[5] the limit

  Reads only what expired (ZRANGEBYSCORE leases -inf now LIMIT 0 limit):
  O(limit x log N), never O(in flight).

  Output:
    {handled, {{stream id, field, value, ...}, ...}, needed}  handled <
    limit and nothing needed means nothing more is due; `needed` ({ids,
    models, raw keys}, includes/recover.lua) is what it stopped for. An
    orphan id (record gone) is dropped.

  Transitions: PROCESSING -> QUEUED (same sequence, claimable at once,
  error_code LEASE_EXPIRED); PROCESSING -> FAILED (ATTEMPTS_EXHAUSTED) past
  max_attempts, or -> CANCELLED for a child of a cancelled group (never
  retried), with the group steps of a child's end.
]]
--- @include "policy"
--- @include "declared"
--- @include "common"
--- @include "plan"
--- @include "recover"

local handled = fail_due_attempts(K_LEASES, K_RUN, tonumber(ARGV[5]), ERR.LEASE_EXPIRED,
  lease_expired_message,
  function() return 0 end)
return recover_reply(handled)
