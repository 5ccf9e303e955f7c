--[[
  Read one job: record, queue position and a group's children, in one round trip.

  Input:
    KEYS[1]  the job hash
    ARGV[1]  prefix "jobgate:{<partition>}:" (builds the result, children and
             ready-queue keys, same hash tag)
    ARGV[2]  job id
    ARGV[3]  tenant

  Output:
    {1, snapshot}  (see includes/snapshot.lua)
    {-1}  JOB_NOT_FOUND: no record, or another tenant's

  Transitions: none (read only).
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"

if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[3] then
  return {RC.JOB_NOT_FOUND}
end
return {1, snapshot(ARGV[1], ARGV[2])}
