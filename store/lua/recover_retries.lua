--[[
  Retries whose backoff ended: the QUEUED job becomes claimable at its place.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    ARGV[1..3]   prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4]      limit

  Reads only what is due (ZRANGEBYSCORE retries -inf now LIMIT).

  Output:
    {handled, {}}  no status changes (the job was QUEUED already)

  Transitions: none; the id moves into its ready queue (same sequence).
  Publishes "r <model>".
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"
--- @include "common"

local ids = redis.call('ZRANGEBYSCORE', K_RETRIES, '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do
  redis.call('ZREM', K_RETRIES, id)
  local f = redis.call('HMGET', jk(id), 'status', 'model', 'priority', 'seq')
  if not f[1] then
    redis.call('ZREM', K_QTIMEOUTS, id)
  elseif f[1] == ST.QUEUED then
    redis.call('ZADD', queue_key(PREFIX, f[2], f[3]), f[4], id)
    notify('r', f[2])
    notify('j', id)
  end
end
return recover_reply(#ids)
