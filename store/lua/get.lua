--[[
  Read one job: record, queue position and a group's children, in one round trip.

  Input:
    KEYS[1..]  the declared job and model groups (includes/declared.lua):
               the job; its model (for the queue position) and a group's
               children, once asked for
    ARGV[1]    job id
    ARGV[2]    tenant ('' = any tenant: an admin's read)
    ARGV[..]   the declaration tail (includes/declared.lua)

  Output:
    {1, snapshot}  (see includes/snapshot.lua)
    {-1}  JOB_NOT_FOUND: no record, or another tenant's
    {-8, ids, models, keys}  KEYS_NEEDED: declare these and call again

  Transitions: none (read only).
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "plan"

local id = ARGV[1]
local owner = redis.call('HGET', jk(id), 'tenant')
if not owner or (ARGV[2] ~= '' and owner ~= ARGV[2]) then
  return {RC.JOB_NOT_FOUND}
end
plan_snapshot(id)
local needed = keys_needed()
if needed then
  return needed
end
return {1, snapshot(id)}
