#!lua flags=allow-oom
--[[
  Cancel a job or a group.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11..]   the declared job and model groups and raw keys
                 (includes/declared.lua): the job, and what the plan asks
                 for (its model, idempotency key, a group's children, a
                 child's parent and siblings)
    KEYS[last]   this call's operation key (includes/once.lua)
    ARGV[1..4]   the transition arguments (includes/common.lua)
    ARGV[5]      job id
    ARGV[6]      tenant (another tenant's job is JOB_NOT_FOUND; '' = any tenant,
                 an admin's cancel)
    ARGV[7]      reason (stored as error_message)
    ARGV[8]      actor: who cancels when not the job's tenant ("admin:ops"; '' for
                 the tenant itself), written into the events (common.lua ACTOR)
    ARGV[..]     the declaration tail (includes/declared.lua)

  Output:
    {1, snapshot}  cancelled now (also the answer to a resend of that call)
    {0, snapshot}  already terminal: nothing changed
    {-1}  JOB_NOT_FOUND: no record, or another tenant's
    {-8, ids, models, keys}  KEYS_NEEDED: declare these and call again
          (nothing changed)

  Transitions: HELD | QUEUED -> CANCELLED; PROCESSING -> CANCELLED with
  cancel_requested (the lease id stays, so the worker's heartbeat learns it
  and its set_result gets JOB_CANCELLED); a group parent -> CANCELLED with its
  HELD/QUEUED children (running children run on). A child's end updates its
  parent as set_result does. TTL as set_result. Under OOM it still runs:
  its shebang says allow-oom.
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "common"
--- @include "plan"
--- @include "once"

local id = ARGV[5]
local key = jk(id)
local reason = ARGV[7]
ACTOR = ARGV[8]
if op_recorded() then
  return {1, snapshot(id)}
end
local f = redis.call('HMGET', key, 'status', 'tenant', 'kind')
if not f[1] or (ARGV[6] ~= '' and f[2] ~= ARGV[6]) then
  return {RC.JOB_NOT_FOUND}
end
plan_snapshot(id)
if not TERMINAL[f[1]] then
  plan_transition(id)
  plan_groups()
end
local needed = keys_needed()
if needed then
  return needed
end
if TERMINAL[f[1]] then
  return {0, snapshot(id)}
end
if f[1] == ST.PROCESSING then
  redis.call('HSET', key, 'cancel_requested', 1)
end
finish(id, ST.CANCELLED, ERR.CANCELLED, reason)
if f[3] == KIND.GROUP then
  for _, cid in ipairs(redis.call('LRANGE', children_key(id), 0, -1)) do
    local status = redis.call('HGET', jk(cid), 'status')
    if status == ST.HELD or status == ST.QUEUED then
      finish(cid, ST.CANCELLED, ERR.CANCELLED, reason)
    end
  end
end
op_record('1')
return {1, snapshot(id)}
