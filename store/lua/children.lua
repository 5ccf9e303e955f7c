--[[
  Read a group's children in index order.

  Input:
    KEYS[1]  the parent's job hash
    KEYS[2]  the parent's children list
    ARGV[1]  prefix "jobgate:{<partition>}:" (builds the children's keys)
    ARGV[2]  tenant

  Output:
    {1, {snapshot, ...}}  empty for a job that is not a group
    {-1}  JOB_NOT_FOUND: no record, or another tenant's

  Transitions: none (read only).
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"

if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[2] then
  return {RC.JOB_NOT_FOUND}
end
local out = {}
for _, cid in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  local snap = snapshot(ARGV[1], cid)
  if snap then
    out[#out + 1] = snap
  end
end
return {1, out}
