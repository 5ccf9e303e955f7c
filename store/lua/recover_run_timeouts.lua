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
  ends); PROCESSING -> FAILED (RUN_TIMEOUT) on the last attempt. The lease
  dies: the worker's next heartbeat gets LEASE_LOST.
]]
--- @include "keys"
--- @include "snapshot"
--- @include "common"

local ids = redis.call('ZRANGEBYSCORE', K_RUN, '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do
  redis.call('ZREM', K_RUN, id)
  local key = jk(id)
  local f = redis.call('HMGET', key, 'status', 'attempts', 'max_attempts', 'model', 'run_timeout')
  if not f[1] then
    redis.call('ZREM', K_LEASES, id)
  elseif f[1] == 'processing' then
    local message = 'attempt ' .. f[2] .. ' ran longer than ' .. (tonumber(f[5]) / 1000) .. 's'
    local attempts = tonumber(f[2])
    if attempts >= tonumber(f[3]) then
      finish(id, 'failed', 'RUN_TIMEOUT', message)
    else
      redis.call('HSET', key, 'error_code', 'RUN_TIMEOUT', 'error_message', message)
      leave_processing(id, f[4])
      to_queued(id, 'processing',
        backoff_ms(attempts, tonumber(ARGV[5]), tonumber(ARGV[6])), 'RUN_TIMEOUT')
    end
  end
end
return recover_reply(#ids)
