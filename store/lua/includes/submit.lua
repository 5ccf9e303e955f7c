-- includes/submit.lua: Submit's checks and writes, shared by submit.lua (one
-- request) and submit_batch.lua (many, all or nothing). Needs the `policy`,
-- `declared`, `snapshot`, `common` and `plan` includes first.
--
-- An item is one request:
--   {tenant, fingerprint, idem (its idempotency key's name in KEYS, or nil),
--    spec (decoded JSON, see submit.lua ARGV[10]), payload_at (the ARGV index
--    of its first payload; one payload per spec.jobs entry, in order)}
-- Caps: {per_tenant, total, children} (max_live_per_tenant, max_live_total,
-- max_group_children).
--
-- Declared by the caller: every job id of the request (a group's and its
-- children's) and every model. The job an idempotency key names is met
-- here: a check that needs it answers NEED_KEYS (it was asked for).

-- What a check decided, besides a refusal {RC.*}: answer a job that exists
-- already, or the job an earlier item of the same batch creates.
local REUSE_JOB = 'job'
local REUSE_ITEM = 'item'
local NEED_KEYS = 'need'

-- What the earlier items of a batch will create, so later items see them:
-- idempotency keys taken (idem -> {fingerprint, index}) and live jobs added
-- (per tenant, in total). A single submit starts from an empty one.
local function submit_pending()
  return {keys = {}, live = {}, total = 0}
end

-- Submit's checks, in its order: idempotency first (a reuse is never
-- capped), then the group's size, then admission. Reads only.
-- Returns {RC.*} (refused), {REUSE_JOB, id} (its snapshot's keys asked
-- for), {REUSE_ITEM, index}, {NEED_KEYS} (the held job is not declared), or
-- nil: create it (and `pending` now counts it as item `index`).
local function submit_check(item, caps, pending, index)
  local idem = item.idem
  if idem then
    local earlier = pending.keys[idem]
    if earlier then
      if earlier.fingerprint ~= item.fingerprint then
        return {RC.IDEMPOTENCY_KEY_REUSED}
      end
      return {REUSE_ITEM, earlier.index}
    end
    local held = redis.call('GET', idem)
    if held then
      local held_fingerprint, held_id = string.match(held, '^(%S+) (%S+)$')
      if held_id and not need_job(held_id) then
        return {NEED_KEYS}
      end
      if held_id and redis.call('EXISTS', jk(held_id)) == 1 then
        if held_fingerprint ~= item.fingerprint then
          return {RC.IDEMPOTENCY_KEY_REUSED}
        end
        plan_snapshot(held_id)
        return {REUSE_JOB, held_id}
      end
    end
  end

  local tenant = item.tenant
  local n = #item.spec['jobs']
  if item.spec['kind'] == KIND.GROUP and (n == 0 or n > caps.children) then
    return {RC.INVALID_CHILDREN}
  end
  local added = pending.live[tenant] or 0
  local live = tonumber(redis.call('HGET', K_LIVE, tenant)) or 0
  if live + added + n > caps.per_tenant then
    return {RC.QUOTA_EXCEEDED}
  end
  local live_total = tonumber(redis.call('GET', K_LIVE_TOTAL)) or 0
  if live_total + pending.total + n > caps.total then
    return {RC.QUEUE_FULL}
  end

  pending.live[tenant] = added + n
  pending.total = pending.total + n
  if idem then
    pending.keys[idem] = {fingerprint = item.fingerprint, index = index}
  end
  return nil
end

-- A job's record. job.fields are the JobSpec fields it keeps as submitted,
-- encoded (store/fields.py COPIED), written as they come: a new one needs
-- no Lua.
local function submit_new_record(item, job, seq, kind, status, parent_id, child_index, payload)
  local key = jk(job['id'])
  local record = {
    'id', job['id'], 'tenant', item.tenant, 'kind', kind, 'status', status,
    'priority', item.spec['priority'], 'model', job['model'], 'seq', seq,
    'idempotency_key', job['idempotency_key'] or '',
    'attempts', '0', 'max_attempts', job['max_attempts'] or 0,
    'queue_timeout', job['queue_timeout'] or 0, 'run_timeout', job['run_timeout'] or 0,
    'create_time', NOW_S, 'update_time', NOW_S, 'progress', '0', 'stage', '',
    'parent_id', parent_id, 'child_index', child_index, 'cancel_requested', '0',
    'worker_id', '', 'error_code', '', 'error_message', '',
    'weight', item.spec['weight'] or 0}
  for name, value in pairs(job['fields'] or {}) do
    record[#record + 1] = name
    record[#record + 1] = value
  end
  redis.call('HSET', key, unpack(record))
  index_created(job['id'], job['model_index'], NOW_S)
  if payload then
    redis.call('SET', payload_key(job['id']), payload)
  end
  redis.call('SADD', K_MODELS, queue_class(job['model'], job['pool']))
  return key
end

-- What emit() would read of a record submit_new_record just wrote.
local function new_event_fields(item, job, kind, parent_id)
  return {parent_id, item.tenant, job['model'], item.spec['priority'], '0', '', '', kind, NOW_S}
end

-- Create the item's job (or group with its children) after submit_check
-- admitted it; returns its id.
local function submit_create(item)
  local spec = item.spec
  local jobs = spec['jobs']
  local n = #jobs
  local tenant = item.tenant
  -- First write: next_score's SET (fair share off) or HSET (on), or the
  -- HINCRBY below for a group, is DENYOOM, so under OOM nothing below
  -- happens (and in a batch, the first item's write comes before any other).
  local seq = '0'
  if spec['kind'] ~= KIND.GROUP then
    local job = jobs[1]
    seq = next_score(job['model'], spec['priority'], tenant, spec['weight'], job['floor'])
  end
  redis.call('HINCRBY', K_LIVE, tenant, n)
  redis.call('INCRBY', K_LIVE_TOTAL, n)

  local root = spec['id']
  if spec['kind'] == KIND.GROUP then
    local pkey = submit_new_record(item, spec, seq, KIND.GROUP, ST.QUEUED, '', 0, nil)
    -- child_models: a plan learns every child's queue classes with the
    -- group's record, without reading the children first (includes/plan.lua)
    local models, seen = {}, {}
    for _, child in ipairs(jobs) do
      for _, class in ipairs({child['model'], queue_class(child['model'], child['pool'])}) do
        if not seen[class] then
          seen[class] = true
          models[#models + 1] = class
        end
      end
    end
    redis.call('HSET', pkey, 'max_parallel', spec['max_parallel'], 'total', n, 'done', 0,
      'completed', 0, 'active', 0, 'child_models', cjson.encode(models))
    emit(root, nil, ST.QUEUED, new_event_fields(item, spec, KIND.GROUP, ''))
    for i, child in ipairs(jobs) do
      -- a child takes its score (next_score) when it is released (to_queued)
      submit_new_record(item, child, 0, KIND.CHILD, ST.HELD, root, i - 1,
        ARGV[item.payload_at + i - 1])
      redis.call('RPUSH', children_key(root), child['id'])
      redis.call('ZADD', held_key(root), i - 1, child['id'])
      emit(child['id'], nil, ST.HELD, new_event_fields(item, child, KIND.CHILD, root))
    end
    release_held(root)
  else
    local job = jobs[1]
    submit_new_record(item, job, seq, KIND.SINGLE, ST.QUEUED, '', 0, ARGV[item.payload_at])
    local queue_timeout = tonumber(job['queue_timeout']) or 0
    if queue_timeout > 0 then
      redis.call('ZADD', K_QTIMEOUTS, NOW + queue_timeout, root)
    end
    local class = queue_class(job['model'], job['pool'])
    redis.call('ZADD', queue_key(class, spec['priority']), seq, root)
    emit(root, nil, ST.QUEUED, new_event_fields(item, job, KIND.SINGLE, ''))
    notify('r', class .. ' ' .. root)
  end
  -- no "j" for a job just made: nobody can be watching it yet, and the
  -- "r" above (or release_held's) wakes a reader of the events stream

  if item.idem then
    redis.call('SET', item.idem, item.fingerprint .. ' ' .. root)
    redis.call('HSET', jk(root), 'idem_ref', item.idem)
  end
  return root
end
