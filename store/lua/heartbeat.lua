#!lua flags=allow-oom
--[[
  Extend a lease and record progress and stage.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11..15] the declared job and model groups (includes/declared.lua):
                 the job (one group)
    ARGV[1..4]   the transition arguments (includes/common.lua)
    ARGV[5]      job id
    ARGV[6]      lease id (fencing token)
    ARGV[7]      progress (0..1, as a string)
    ARGV[8]      stage ("" keeps the current one)
    ARGV[9]      lease_timeout_ms
    ARGV[..]     the declaration tail (includes/declared.lua): the job id

  Output:
    {1, lease_deadline_ms, cancel_requested (0|1), worker_id (the lease's worker,
    for the worker registry: a heartbeat names no worker)}
    {-1}  JOB_NOT_FOUND: no record (expired, or never existed)
    {-2}  LEASE_LOST: not the job's live lease (changes nothing)
    A job cancelled while this lease held it answers {1, old deadline, 1, worker_id}.

  Transitions: none (the lease deadline in `leases` moves). Under OOM it still
  runs: its shebang says allow-oom. Publishes "j <id>" when progress or stage
  changed.
]]
--- @include "policy"
--- @include "declared"
--- @include "common"

local id = ARGV[5]
local key = jk(id)
local f = redis.call('HMGET', key, 'status', 'lease_id', 'lease_deadline', 'progress', 'stage',
  'cancel_requested', 'worker_id')
if not f[1] then
  return {RC.JOB_NOT_FOUND}
end
-- store/policy.py heartbeat_verdict, as the table it generated
local verdict = HEARTBEAT_VERDICT[f[1] .. '|' .. flags(f[2] == ARGV[6], f[6] == '1')]
if verdict == VERDICT.CANCEL_REQUESTED then
  return {1, tonumber(f[3]), 1, f[7] or ''}
elseif verdict ~= VERDICT.APPLY then
  return {RC.LEASE_LOST}
end
local deadline = NOW + tonumber(ARGV[9])
redis.call('ZADD', K_LEASES, 'XX', deadline, id)
local stage = ARGV[8]
if stage == '' then
  stage = f[5]
end
redis.call('HSET', key, 'lease_deadline', deadline, 'progress', ARGV[7], 'stage', stage)
if tonumber(ARGV[7]) ~= tonumber(f[4]) or stage ~= f[5] then
  redis.call('HSET', key, 'update_time', NOW)
  notify('j', id)
end
return {1, deadline, 0, f[7] or ''}
