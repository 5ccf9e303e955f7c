--[[
  Drain index:expiring: take jobs whose records expired out of ListJobs' runs.

  Recovery calls it with the list's head entries; it handles them in order
  while each is still the head and due, so replicas draining at once handle
  each entry once.

  Input:
    KEYS[1]        index:status
    KEYS[2]        index:expiring
    KEYS[1 + 2i]   entry i's job record
    KEYS[2 + 2i]   entry i's index:model:<tenant>:<model> set
    ARGV[1..]      the entries, "<due ms> <index:status member> <model>",
                   as LRANGE read them

  Output:
    n  the entries handled (popped)

  Per due entry: its record gone -> its members leave index:status and its
  model set; its record still expiring later (result_ttl grew since) -> the
  entry goes again to the list's tail with that due time; its record live
  again (RetryJob) -> the entry is dropped (the job's next end pushes a new
  one).

  Transitions: none (index upkeep only).
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local handled = 0
for i = 1, #ARGV do
  local entry = ARGV[i]
  if redis.call('LINDEX', KEYS[2], 0) ~= entry then
    break
  end
  local due, member, model = string.match(entry, '^(%d+) (%S+) (%S*)$')
  if not due or tonumber(due) > now then
    break
  end
  local ttl = redis.call('PTTL', KEYS[1 + 2 * i])
  if ttl == -2 then
    redis.call('ZREM', KEYS[1], member)
    redis.call('ZREM', KEYS[2 + 2 * i], string.sub(member, -39))
  elseif ttl > 0 then
    redis.call('RPUSH', KEYS[2], string.format('%.0f', now + ttl) .. ' ' .. member .. ' ' .. model)
  end
  redis.call('LPOP', KEYS[2])
  handled = handled + 1
end
return handled
