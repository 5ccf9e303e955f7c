--[[
  Create a single job, or a group with its children; or return the keyed original.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11]     idempotency key (string "<fingerprint> <job id>"), only when
                 the request carries a key
    KEYS[last]   this call's operation key (includes/once.lua)
    ARGV[1..3]   prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4]      tenant
    ARGV[5]      request fingerprint
    ARGV[6]      max_live_per_tenant
    ARGV[7]      max_live_total
    ARGV[8]      max_group_children
    ARGV[9]      JSON spec: {kind, id, priority, idempotency_key, max_parallel,
                 model, jobs: [{id, model, content_type, labels, max_attempts,
                 queue_timeout, run_timeout, idempotency_key}]}
    ARGV[10..]   one payload per spec.jobs entry, in order

  Keys built from the prefix: the job hashes, payloads, children list, held
  set, ready queue of each model.

  Output:
    {1, reused (0|1), snapshot}
    a resend of a call that created a job: {1, 0, snapshot} of that job
    {-4}  IDEMPOTENCY_KEY_REUSED: same tenant + key, another fingerprint
    {-5}  QUOTA_EXCEEDED: the tenant's live jobs would pass the cap
    {-6}  QUEUE_FULL: live jobs in total would pass the cap
    {-7}  INVALID_CHILDREN: a group with no children or more than the cap
    OOM error (redis): the first write (INCR) is refused before any change

  Transitions: none -> QUEUED (single, group parent); none -> HELD -> QUEUED
  (children, up to max_parallel). Events: one per transition. Publishes
  "r <model>" and "j <id>".
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"
--- @include "common"
--- @include "once"

local tenant = ARGV[4]
local fingerprint = ARGV[5]
local spec = cjson.decode(ARGV[9])
local idem = #KEYS == 12 and KEYS[11] or nil

local created = op_recorded()
if created then
  return {1, 0, snapshot(PREFIX, created)}
end

if idem then
  local held = redis.call('GET', idem)
  if held then
    local held_fingerprint, held_id = string.match(held, '^(%S+) (%S+)$')
    if held_id and redis.call('EXISTS', jk(held_id)) == 1 then
      if held_fingerprint ~= fingerprint then
        return {RC.IDEMPOTENCY_KEY_REUSED}
      end
      return {1, 1, snapshot(PREFIX, held_id)}
    end
  end
end

local jobs = spec['jobs']
local n = #jobs
if spec['kind'] == KIND.GROUP and (n == 0 or n > tonumber(ARGV[8])) then
  return {RC.INVALID_CHILDREN}
end
local live = tonumber(redis.call('HGET', K_LIVE, tenant)) or 0
if live + n > tonumber(ARGV[6]) then
  return {RC.QUOTA_EXCEEDED}
end
local live_total = tonumber(redis.call('GET', K_LIVE_TOTAL)) or 0
if live_total + n > tonumber(ARGV[7]) then
  return {RC.QUEUE_FULL}
end

-- First write: INCR is DENYOOM, so under OOM nothing below happens.
local seq = redis.call('INCR', K_SEQ)
redis.call('HINCRBY', K_LIVE, tenant, n)
redis.call('INCRBY', K_LIVE_TOTAL, n)

local priority = spec['priority']
local function create(job, seq, kind, status, parent_id, child_index, payload)
  local key = jk(job['id'])
  redis.call('HSET', key,
    'id', job['id'], 'tenant', tenant, 'kind', kind, 'status', status,
    'priority', priority, 'model', job['model'], 'seq', seq,
    'content_type', job['content_type'] or '', 'labels', job['labels'] or '{}',
    'idempotency_key', job['idempotency_key'] or '',
    'attempts', 0, 'max_attempts', job['max_attempts'] or 0,
    'queue_timeout', job['queue_timeout'] or 0, 'run_timeout', job['run_timeout'] or 0,
    'create_time', NOW, 'update_time', NOW, 'progress', '0', 'stage', '',
    'parent_id', parent_id, 'child_index', child_index, 'cancel_requested', 0,
    'worker_id', '', 'error_code', '', 'error_message', '')
  redis.call('PERSIST', key)
  if payload then
    redis.call('SET', payload_key(PREFIX, job['id']), payload)
  end
  redis.call('SADD', K_MODELS, job['model'])
  return key
end

local root = spec['id']
if spec['kind'] == KIND.GROUP then
  local pkey = create(spec, seq, KIND.GROUP, ST.QUEUED, '', 0, nil)
  redis.call('HSET', pkey, 'max_parallel', spec['max_parallel'], 'total', n, 'done', 0,
    'completed', 0, 'active', 0)
  emit(root, nil, ST.QUEUED)
  for i, child in ipairs(jobs) do
    -- a child takes its sequence number when it is released (to_queued)
    create(child, 0, KIND.CHILD, ST.HELD, root, i - 1, ARGV[9 + i])
    redis.call('RPUSH', children_key(PREFIX, root), child['id'])
    redis.call('ZADD', held_key(PREFIX, root), i - 1, child['id'])
    emit(child['id'], nil, ST.HELD)
  end
  release_held(root)
else
  local job = jobs[1]
  create(job, seq, KIND.SINGLE, ST.QUEUED, '', 0, ARGV[10])
  local queue_timeout = tonumber(job['queue_timeout']) or 0
  if queue_timeout > 0 then
    redis.call('ZADD', K_QTIMEOUTS, NOW + queue_timeout, root)
  end
  redis.call('ZADD', queue_key(PREFIX, job['model'], priority), seq, root)
  emit(root, nil, ST.QUEUED)
  notify('r', job['model'])
end
notify('j', root)

if idem then
  redis.call('SET', idem, fingerprint .. ' ' .. root)
  redis.call('HSET', jk(root), 'idem_ref', idem)
end
op_record(root)
return {1, 0, snapshot(PREFIX, root)}
