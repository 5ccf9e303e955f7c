--[[
  Expired leases: requeue at the original place, or end FAILED past max_attempts.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    ARGV[1..3]   prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4]      limit: at most this many expired leases per call

  Reads only what expired (ZRANGEBYSCORE leases -inf now LIMIT 0 limit):
  O(limit x log N), never O(in flight). Keys built from the prefix: the
  jobs' hashes, their ready queues, a child's parent.

  Output:
    {handled, {{stream id, field, value, ...}, ...}}  handled < limit means
    nothing more is due. An orphan id (record gone) is dropped.

  Transitions: PROCESSING -> QUEUED (same sequence, claimable at once,
  error_code LEASE_EXPIRED); PROCESSING -> FAILED (ATTEMPTS_EXHAUSTED) past
  max_attempts, or -> CANCELLED for a child of a cancelled group (never
  retried), with the group steps of a child's end.
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"
--- @include "common"

local handled = fail_due_attempts(K_LEASES, K_RUN, tonumber(ARGV[4]), ERR.LEASE_EXPIRED,
  lease_expired_message,
  function() return 0 end)
return recover_reply(handled)
