--[[
  Read the worker registry with the store's clock (ListWorkers, the
  jobgate_workers gauge).

  Input:
    KEYS[1]  workers       hash  worker id -> its pool and models (JSON)
    KEYS[2]  workers_seen  zset  worker id by when it was last seen (ms)

  Output:
    {now ms, {worker id, last seen ms, info, ...}}: every entry (record_workers
    trims the registry; the caller applies the 120 s window)

  Transitions: none (read only). O(registered workers).
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local infos = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  infos[flat[i]] = flat[i + 1]
end
local seen = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local entries = {}
for i = 1, #seen, 2 do
  entries[#entries + 1] = seen[i]
  entries[#entries + 1] = seen[i + 1]
  entries[#entries + 1] = infos[seen[i]] or ''
end
return {now, entries}
