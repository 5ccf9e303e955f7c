--[[
  Read a group's children in index order.

  Input:
    KEYS[1..]  the declared job and model groups (includes/declared.lua):
               the parent; its children and their models, once asked for
    ARGV[1]    the parent's job id
    ARGV[2]    tenant ('' = any tenant: an admin's read)
    ARGV[..]   the declaration tail (includes/declared.lua)

  Output:
    {1, {snapshot, ...}}  empty for a job that is not a group
    {-1}  JOB_NOT_FOUND: no record, or another tenant's
    {-8, ids, models, keys}  KEYS_NEEDED: declare these and call again

  Transitions: none (read only).
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "plan"

local id = ARGV[1]
local f = redis.call('HMGET', jk(id), 'tenant', 'child_models')
if not f[1] or (ARGV[2] ~= '' and f[1] ~= ARGV[2]) then
  return {RC.JOB_NOT_FOUND}
end
local ids = redis.call('LRANGE', children_key(id), 0, -1)
if f[2] then
  for _, model in ipairs(cjson.decode(f[2])) do
    need_model(model)
  end
end
for _, cid in ipairs(ids) do
  plan_snapshot(cid)
end
local needed = keys_needed()
if needed then
  return needed
end
local out = {}
for _, cid in ipairs(ids) do
  local snap = snapshot(cid)
  if snap then
    out[#out + 1] = snap
  end
end
return {1, out}
