#!lua flags=allow-oom
--[[
  Give back leases whose claimer is gone before it learned of them (its
  deadline passed, it was cancelled, the server drains, the claim's reply
  was lost): each job goes back to QUEUED at its original place with its
  attempts restored, as if the claim had not happened.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11..]   the declared job and model groups and raw keys
                 (includes/declared.lua): the jobs, and what the plan asks
                 for (their models, a child's parent and siblings)
    KEYS[last]   when ARGV[5] is 1: the operation key of the claim being
                 undone (claim.lua's last KEY). Its recorded leases are
                 released, and it is marked so that the claim, should it
                 still run (its request was delayed), claims nothing.
    ARGV[1..4]   the transition arguments (includes/common.lua)
    ARGV[5]      1 if KEYS[last] is a claim's operation key, else 0
    ARGV[6..]    job id, lease id pairs to release (besides KEYS[last]'s)
    ARGV[..]     the declaration tail (includes/declared.lua)

  Output:
    n  how many jobs were released; a lease that is no longer the job's live
       one (ended, expired, released already) is skipped, so a repeat
       changes nothing
    {-8, ids, models, keys}  KEYS_NEEDED: declare these and call again
       (nothing changed)

  Transitions: PROCESSING -> QUEUED (attempts-1; the event carries the
  restored count); a child of a cancelled group PROCESSING -> CANCELLED
  instead. Publishes "r <model> <id>" and "j <id>". Under OOM it still runs:
  its shebang says allow-oom.
]]
--- @include "policy"
--- @include "declared"
--- @include "common"
--- @include "plan"

local OP_TTL_MS = 60000  -- as includes/once.lua

local function release_one(id, lease_id)
  local key = jk(id)
  local f = redis.call('HMGET', key, 'status', 'lease_id', 'model', 'parent_id', 'pool')
  if f[1] ~= ST.PROCESSING or f[2] ~= lease_id then
    return 0
  end
  redis.call('HINCRBY', key, 'attempts', -1)
  -- the lease dies: a late heartbeat or set_result with it is LEASE_LOST
  redis.call('HSET', key, 'lease_id', '')
  if f[4] and f[4] ~= '' and redis.call('HGET', jk(f[4]), 'status') == ST.CANCELLED then
    finish(id, ST.CANCELLED, ERR.CANCELLED, MSG_GROUP_CANCELLED)
    return 1
  end
  leave_processing(id, queue_class(f[3], f[5]))
  to_queued(id, ST.PROCESSING, 0)
  return 1
end

-- {id, lease id} pairs: the undone claim's recorded leases, then ARGV's.
local K_CLAIM_OP = ARGV[5] == '1' and KEYS[#KEYS] or nil
local leases = {}
if K_CLAIM_OP then
  local recorded = redis.call('GET', K_CLAIM_OP)
  if recorded then
    for _, lease in ipairs(cjson.decode(recorded)) do
      leases[#leases + 1] = {lease[1], lease[2]}
    end
  end
end
for i = 6, ARGC - 1, 2 do
  leases[#leases + 1] = {ARGV[i], ARGV[i + 1]}
end

-- plan: only the leases still live change anything
for _, lease in ipairs(leases) do
  if need_job(lease[1]) and redis.call('HGET', jk(lease[1]), 'lease_id') == lease[2] then
    plan_transition(lease[1])
  end
end
local needed = finish_plan()
if needed then
  return needed
end

local released = 0
for _, lease in ipairs(leases) do
  released = released + release_one(lease[1], lease[2])
end
if K_CLAIM_OP then
  redis.call('SET', K_CLAIM_OP, '[]', 'PX', OP_TTL_MS)
end
return released
