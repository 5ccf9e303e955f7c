--[[
  Hold or renew the recovery leadership.

  Input:
    KEYS[1]  leader (string: holder id, PX expiry)
    ARGV[1]  holder
    ARGV[2]  ttl ms

  Output:
    1  the holder has the leadership for ttl from now
    0  someone else holds it

  Transitions: none. Recovery must go on when Redis is out of memory: a
  renewal is a PEXPIRE, and a first SET is preceded by a DEL (a write that
  never grows memory; see the OOM note in includes/common.lua).
]]
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if current then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
