--[[
  RetryJob (redrive): put a FAILED or CANCELLED job, or a FAILED, PARTIAL or
  CANCELLED group's unfinished children, back to work.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11..]   the index keys and the declared job and model groups and raw
                 keys (includes/declared.lua): the job, and what the plan asks
                 for (its model, idempotency key, a group's children with
                 their models and keys)
    KEYS[last]   this call's operation key (includes/once.lua)
    ARGV[1..4]   the transition arguments (includes/common.lua)
    ARGV[5]      job id
    ARGV[6]      tenant (another tenant's job is JOB_NOT_FOUND; '' = any tenant,
                 an admin's retry)
    ARGV[7]      actor: who retries when not the job's tenant ("admin:ops"; ''
                 for the tenant itself), written into the events
    ARGV[8]      max_live_per_tenant (for the job's tenant; partitions counted)
    ARGV[9]      max_live_total
    ARGV[..]     the declaration tail (includes/declared.lua)

  Output:
    {1, snapshot}  retried (also the answer to a resend of that call)
    {-1}  JOB_NOT_FOUND: no record, or another tenant's
    {-5}  QUOTA_EXCEEDED: the tenant's live jobs would pass the cap
    {-6}  QUEUE_FULL: live jobs in total would pass the cap
    {-8, ids, models, keys}  KEYS_NEEDED: declare these and call again
          (nothing changed)
    {-9, why}  JOB_NOT_RETRYABLE: why is 'alone' (a group child alone),
          'status' (not a status its kind is retried from: store/redrive.py
          RETRYABLE) or 'done' (every child of the group completed)
    OOM error (redis): the first write (HSET) is refused before any change

  Transitions: FAILED | CANCELLED -> QUEUED (a single job, at the back of
  its queue: a fresh score from next_seq, as submit takes); a group parent
  FAILED | PARTIAL | CANCELLED -> QUEUED (PROCESSING while a child still
  runs), its FAILED | CANCELLED children -> HELD, then HELD -> QUEUED under
  max_parallel (release_held). Each job back at work: attempts 0, error,
  end_time, worker, lease (a late report of the old attempt is LEASE_LOST),
  progress and stage cleared, no TTL (record, payload, result, idempotency
  key PERSISTed; its index:expiring entry is dropped by the drain, which
  finds the record live). Completed children keep their results; children
  still running run on and count as active. Events: one per transition,
  naming the actor. Publishes as to_queued and release_held do.
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "common"
--- @include "plan"
--- @include "once"

-- store/redrive.py RETRYABLE
local RETRYABLE = {
  [KIND.SINGLE] = {[ST.FAILED] = true, [ST.CANCELLED] = true},
  [KIND.GROUP] = {[ST.FAILED] = true, [ST.PARTIAL] = true, [ST.CANCELLED] = true},
}

local id = ARGV[5]
local tenant = ARGV[6]
ACTOR = ARGV[7]
local cap_tenant, cap_total = tonumber(ARGV[8]), tonumber(ARGV[9])
local key = jk(id)
if op_recorded() then
  return {1, snapshot(id)}
end
local f = redis.call('HMGET', key, 'status', 'tenant', 'kind')
if not f[1] or (tenant ~= '' and f[2] ~= tenant) then
  return {RC.JOB_NOT_FOUND}
end
local status, owner, kind = f[1], f[2], f[3]
if kind == KIND.CHILD then
  return {RC.JOB_NOT_RETRYABLE, 'alone'}
end
if not (RETRYABLE[kind] or {})[status] then
  return {RC.JOB_NOT_RETRYABLE, 'status'}
end
plan_transition(id)
plan_snapshot(id)
local needed = keys_needed()
if needed then
  return needed
end

-- What goes back to work: a single job, or the group's children that ended
-- without completing.
local children, redo, running, completed = {}, {}, 0, 0
if kind == KIND.GROUP then
  children = redis.call('LRANGE', children_key(id), 0, -1)
  for _, cid in ipairs(children) do
    local child_status = redis.call('HGET', jk(cid), 'status')
    if child_status == ST.COMPLETED then
      completed = completed + 1
    elseif child_status == ST.FAILED or child_status == ST.CANCELLED then
      redo[#redo + 1] = cid
    elseif child_status then
      running = running + 1
    end
  end
  if #redo == 0 and running == 0 then
    return {RC.JOB_NOT_RETRYABLE, 'done'}
  end
end
local count = kind == KIND.GROUP and #redo or 1
if (tonumber(redis.call('HGET', K_LIVE, owner)) or 0) + count > cap_tenant then
  return {RC.QUOTA_EXCEEDED}
end
if (tonumber(redis.call('GET', K_LIVE_TOTAL)) or 0) + count > cap_total then
  return {RC.QUEUE_FULL}
end

-- No TTL on the job's keys.
local function persist(jid)
  local jkey = jk(jid)
  redis.call('PERSIST', jkey)
  redis.call('PERSIST', payload_key(jid))
  redis.call('PERSIST', result_key(jid))
  local idem = redis.call('HGET', jkey, 'idem_ref')
  if idem and idem ~= '' then
    redis.call('PERSIST', declared_key(idem))
  end
end

-- The last attempt's traces cleared; its score dropped, so its next
-- to_queued takes a fresh one (next_seq), as a new job does.
local function revive(jid, to)
  local jkey = jk(jid)
  redis.call('HSET', jkey, 'attempts', 0, 'error_code', '', 'error_message', '',
    'end_time', '', 'worker_id', '', 'lease_id', '', 'outcome', '', 'cancel_requested', 0,
    'progress', '0', 'stage', '', 'update_time', NOW)
  redis.call('HDEL', jkey, 'seq')
  persist(jid)
end

redis.call('HINCRBY', K_LIVE, owner, count)
redis.call('INCRBY', K_LIVE_TOTAL, count)
if kind ~= KIND.GROUP then
  revive(id)
  to_queued(id, status, 0)
else
  local total = #children
  local now_status = running > 0 and ST.PROCESSING or ST.QUEUED
  redis.call('HSET', key, 'status', now_status, 'error_code', '', 'error_message', '',
    'end_time', '', 'cancel_requested', 0, 'update_time', NOW,
    'progress', tostring(completed / math.max(total, 1)), 'done', completed,
    'completed', completed, 'active', running)
  persist(id)
  redis.call('PERSIST', children_key(id))
  emit(id, status, now_status)
  notify('j', id)
  for _, cid in ipairs(children) do
    persist(cid)
  end
  for _, cid in ipairs(redo) do
    local before = redis.call('HGET', jk(cid), 'status')
    revive(cid)
    redis.call('HSET', jk(cid), 'status', ST.HELD)
    redis.call('ZADD', held_key(id), redis.call('HGET', jk(cid), 'child_index'), cid)
    emit(cid, before, ST.HELD)
    notify('j', cid)
  end
  release_held(id)
end
op_record('1')
return {1, snapshot(id)}
