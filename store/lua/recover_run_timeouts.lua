--[[
  Attempts PROCESSING past their run_timeout (heartbeats or not): a failed
  attempt with error_code RUN_TIMEOUT, retried after the backoff.

  Input:
    KEYS[1..], ARGV[1..5]  the recovery input (includes/recover.lua): transition
                           keys, declared job and model groups, ARGV[5] the limit
    ARGV[6]      retry backoff base ms
    ARGV[7]      retry backoff cap ms

  Reads only what is due (ZRANGEBYSCORE run_deadlines -inf now LIMIT).

  Output:
    {handled, events, needed}  (as recover_leases)

  Transitions: PROCESSING -> QUEUED (delayed: in `retries` until the backoff
  ends); PROCESSING -> FAILED (ATTEMPTS_EXHAUSTED) past max_attempts, or
  -> CANCELLED for a child of a cancelled group (never retried). The lease
  dies: the worker's next heartbeat gets LEASE_LOST.
]]
--- @include "policy"
--- @include "declared"
--- @include "common"
--- @include "plan"
--- @include "recover"

local base_ms, max_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
local handled = fail_due_attempts(K_RUN, K_LEASES, tonumber(ARGV[5]), ERR.RUN_TIMEOUT,
  run_timeout_message,
  function(attempts) return backoff_ms(attempts, base_ms, max_ms) end)
return recover_reply(handled)
