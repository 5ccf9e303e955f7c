--[[
  Record one worker-server's batch of sightings in the worker registry, and
  forget the entries nobody has seen for the retention (store/workers.py).

  Input:
    KEYS[1]  workers       hash  worker id -> its pool and models (JSON)
    KEYS[2]  workers_seen  zset  worker id by when it was last seen (ms)
    ARGV[1]  retention ms
    ARGV[2..] three values per sighting: worker id, age ms (how long before
              this call the worker was seen), info (JSON; "" keeps the
              recorded one: the call named a lease, not a pool)

  Output:
    the number of entries forgotten

  Transitions: none (the registry is not job state). The whole batch costs
  one ZADD GT (a sighting never moves last-seen back) and one HSET per
  CHUNK sightings, plus one ZRANGEBYSCORE for the trim: a write per flush,
  not per worker. Redis 6.2+ (ZADD GT).
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- unpack() of a whole large batch would overflow Lua's C stack
local CHUNK = 1000
local count = (#ARGV - 1) / 3
local first = 0
while first < count do
  local scores, infos = {}, {}
  for i = first, math.min(first + CHUNK, count) - 1 do
    local at = 2 + i * 3
    scores[#scores + 1] = string.format('%.0f', now - tonumber(ARGV[at + 1]))
    scores[#scores + 1] = ARGV[at]
    if ARGV[at + 2] ~= '' then
      infos[#infos + 1] = ARGV[at]
      infos[#infos + 1] = ARGV[at + 2]
    end
  end
  redis.call('ZADD', KEYS[2], 'GT', unpack(scores))
  if #infos > 0 then
    redis.call('HSET', KEYS[1], unpack(infos))
  end
  first = first + CHUNK
end
local cutoff = string.format('(%.0f', now - tonumber(ARGV[1]))
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff, 'LIMIT', 0, CHUNK)
if #stale > 0 then
  redis.call('ZREM', KEYS[2], unpack(stale))
  redis.call('HDEL', KEYS[1], unpack(stale))
end
return #stale
