-- includes/once.lua: a transition runs once per call, even when its reply is lost.
--
-- redis-py resends a command whose connection broke, and a connection may
-- break after Redis ran the script but before its reply arrived. So every
-- call of submit, claim, cancel and set_result passes a fresh operation key
-- (op:<id>, store/keys.py) as its LAST KEY; the same EVALSHA resent carries
-- the same key. A run that changed something records under it what the
-- caller needs to rebuild the answer (a job id, leases), for OP_TTL_MS; a
-- resend finds the record and answers the first run's outcome from the
-- current records instead of running again. A run that changed nothing
-- records nothing: running it again is harmless.
-- See docs/store-semantics.md, "Exactly once per call".

-- Longer than any resend (immediate, within one socket timeout) and than a
-- claim's compensating release (release.lua), short enough to cost little.
local OP_TTL_MS = 60000
local K_OP = KEYS[#KEYS]

-- What the first run with this key recorded, or nil.
local function op_recorded()
  local value = redis.call('GET', K_OP)
  if value then
    return value
  end
  return nil
end

local function op_record(value)
  redis.call('SET', K_OP, value, 'PX', OP_TTL_MS)
end
