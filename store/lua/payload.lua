--[[
  Read a job's input bytes.

  Input:
    KEYS[1]  the job hash
    KEYS[2]  the job's payload (string)
    ARGV[1]  tenant ('' = any tenant: an admin's read)

  Output:
    {1, payload}
    {-1}  JOB_NOT_FOUND: no record, or another tenant's

  Transitions: none (read only).
]]
--- @include "policy"

local owner = redis.call('HGET', KEYS[1], 'tenant')
if not owner or (ARGV[1] ~= '' and owner ~= ARGV[1]) then
  return {RC.JOB_NOT_FOUND}
end
return {1, redis.call('GET', KEYS[2]) or ''}
