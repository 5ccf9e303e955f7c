--[[
  Attempts PROCESSING past their run_timeout (heartbeats or not): a failed
  attempt with error_code RUN_TIMEOUT, retried after the backoff.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    ARGV[1..3]   prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4]      limit
    ARGV[5]      retry backoff base ms
    ARGV[6]      retry backoff cap ms

  Reads only what is due (ZRANGEBYSCORE run_deadlines -inf now LIMIT).

  Output:
    {handled, events}  (as recover_leases)

  Transitions: PROCESSING -> QUEUED (delayed: in `retries` until the backoff
  ends); PROCESSING -> FAILED (ATTEMPTS_EXHAUSTED) past max_attempts. The lease
  dies: the worker's next heartbeat gets LEASE_LOST.
]]
--- @include "keys"
--- @include "snapshot"
--- @include "common"

local ids = redis.call('ZRANGEBYSCORE', K_RUN, '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do
  redis.call('ZREM', K_RUN, id)
  local f = redis.call('HMGET', jk(id), 'status', 'attempts')
  if not f[1] then
    redis.call('ZREM', K_LEASES, id)
  elseif f[1] == 'processing' then
    retry_or_exhaust(id, 'RUN_TIMEOUT', 'attempt ' .. f[2] .. ' ran past its run_timeout',
      backoff_ms(tonumber(f[2]), tonumber(ARGV[5]), tonumber(ARGV[6])))
  end
end
return recover_reply(#ids)
