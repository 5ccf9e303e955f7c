--[[
  Claim up to max_jobs claimable jobs for a worker serving some models.

  Input:
    KEYS[1..10]   the transition keys (see includes/common.lua)
    KEYS[11..]    the ready queues (zset, id by submit sequence) of the
                  models, priority-major: n_models keys for INTERACTIVE, then
                  SYSTEM, then BATCH
    KEYS[last]    this call's operation key (includes/once.lua): the leases
                  are recorded under it as JSON [[id, lease_id, deadline], ...]
    ARGV[1..3]    prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4]       worker_id
    ARGV[5]       lease_timeout_ms
    ARGV[6]       max_jobs
    ARGV[7]       n_models
    ARGV[8..]     one fresh lease id per job that may be claimed (max_jobs)

  Keys built from the prefix: the claimed jobs' hashes and payloads, a
  child's parent hash.

  Output:
    {{record (flat), payload, lease_id, lease_deadline_ms}, ...} in claim
    order; empty when nothing is claimable. A resend of a call that claimed
    answers the same leases (those still held; none after release.lua). An
    id whose record is gone
    (orphan) is dropped from the indexes and skipped, never recreated.

  Transitions: QUEUED -> PROCESSING (attempts+1, worker_id, lease); a group
  parent QUEUED -> PROCESSING when its first child starts. Events: one per
  transition. Publishes "j <id>" and "q <model>". Cost: O(models x log N)
  per claimed job.
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"
--- @include "common"
--- @include "once"

local worker_id = ARGV[4]
local lease_ms = tonumber(ARGV[5])
local max_jobs = tonumber(ARGV[6])
local n_models = tonumber(ARGV[7])

local recorded = op_recorded()
if recorded then
  local replay = {}
  for _, lease in ipairs(cjson.decode(recorded)) do
    local key = jk(lease[1])
    if redis.call('HGET', key, 'lease_id') == lease[2] then
      replay[#replay + 1] = {redis.call('HGETALL', key),
        redis.call('GET', payload_key(PREFIX, lease[1])) or '', lease[2], lease[3]}
    end
  end
  return replay
end

local function claim_one(id, lease_id)
  local key = jk(id)
  local f = redis.call('HMGET', key, 'status', 'model', 'run_timeout', 'parent_id', 'start_time')
  if not f[1] then
    redis.call('ZREM', K_QTIMEOUTS, id)
    redis.call('ZREM', K_RETRIES, id)
    return nil
  end
  if f[1] ~= ST.QUEUED then
    return nil
  end
  redis.call('ZREM', K_QTIMEOUTS, id)
  local deadline = NOW + lease_ms
  redis.call('HINCRBY', key, 'attempts', 1)
  redis.call('HSET', key, 'status', ST.PROCESSING, 'worker_id', worker_id,
    'lease_id', lease_id, 'lease_deadline', deadline, 'start_time', NOW, 'update_time', NOW,
    'cancel_requested', 0, 'outcome', '')
  redis.call('ZADD', K_LEASES, deadline, id)
  local run_timeout = tonumber(f[3]) or 0
  if run_timeout > 0 then
    redis.call('ZADD', K_RUN, NOW + run_timeout, id)
  end
  redis.call('HINCRBY', K_INFLIGHT, f[2], 1)
  emit(id, ST.QUEUED, ST.PROCESSING)
  notify('j', id)
  notify('q', f[2])
  local parent_id = f[4]
  if parent_id and parent_id ~= '' then
    local pkey = jk(parent_id)
    if redis.call('HGET', pkey, 'status') == ST.QUEUED then
      redis.call('HSET', pkey, 'status', ST.PROCESSING, 'start_time', NOW, 'update_time', NOW)
      emit(parent_id, ST.QUEUED, ST.PROCESSING)
      notify('j', parent_id)
    end
  end
  return {redis.call('HGETALL', key), redis.call('GET', payload_key(PREFIX, id)) or '',
    lease_id, deadline}
end

local claimed = {}
local leases = {}
for p = 1, 3 do
  while #claimed < max_jobs do
    -- the head with the lowest sequence among this priority's queues
    local best_key, best_score
    for m = 1, n_models do
      local key = KEYS[10 + (p - 1) * n_models + m]
      local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      if head[1] and (not best_score or tonumber(head[2]) < best_score) then
        best_key, best_score = key, tonumber(head[2])
      end
    end
    if not best_key then
      break
    end
    local id = redis.call('ZPOPMIN', best_key)[1]
    local job = claim_one(id, ARGV[8 + #claimed])
    if job then
      claimed[#claimed + 1] = job
      leases[#leases + 1] = {id, job[3], job[4]}
    end
  end
end
if #leases > 0 then
  op_record(cjson.encode(leases))
end
return claimed
