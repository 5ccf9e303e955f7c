--[[
  Give back leases whose claimer is gone before it learned of them (its
  deadline passed, it was cancelled, the server drains, the claim's reply
  was lost): each job goes back to QUEUED at its original place with its
  attempts restored, as if the claim had not happened.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11]     optional: the operation key of the claim being undone
                 (claim.lua's last KEY). Its recorded leases are released,
                 and it is marked so that the claim, should it still run
                 (its request was delayed), claims nothing.
    ARGV[1..3]   prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4..]    job id, lease id pairs to release (besides KEYS[11]'s)

  Keys built from the prefix: the jobs' hashes, a child's parent.

  Output:
    n  how many jobs were released; a lease that is no longer the job's live
       one (ended, expired, released already) is skipped, so a repeat
       changes nothing

  Transitions: PROCESSING -> QUEUED (attempts-1; the event carries the
  restored count); a child of a cancelled group PROCESSING -> CANCELLED
  instead. Publishes "r <model>" and "j <id>". Under OOM it still runs:
  oom_guard writes first.
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"
--- @include "common"

local OP_TTL_MS = 60000  -- as includes/once.lua

local function release_one(id, lease_id)
  local key = jk(id)
  local f = redis.call('HMGET', key, 'status', 'lease_id', 'model', 'parent_id')
  if f[1] ~= ST.PROCESSING or f[2] ~= lease_id then
    return 0
  end
  oom_guard(key)
  redis.call('HINCRBY', key, 'attempts', -1)
  -- the lease dies: a late heartbeat or set_result with it is LEASE_LOST
  redis.call('HSET', key, 'lease_id', '')
  if f[4] and f[4] ~= '' and redis.call('HGET', jk(f[4]), 'status') == ST.CANCELLED then
    finish(id, ST.CANCELLED, ERR.CANCELLED, MSG_GROUP_CANCELLED)
    return 1
  end
  leave_processing(id, f[3])
  to_queued(id, ST.PROCESSING, 0)
  return 1
end

local released = 0
if KEYS[11] then
  local recorded = redis.call('GET', KEYS[11])
  if recorded then
    for _, lease in ipairs(cjson.decode(recorded)) do
      released = released + release_one(lease[1], lease[2])
    end
  end
  redis.call('SET', KEYS[11], '[]', 'PX', OP_TTL_MS)
end
for i = 4, #ARGV - 1, 2 do
  released = released + release_one(ARGV[i], ARGV[i + 1])
end
return released
