-- includes/claim_jobs.lua: claim queued jobs (claim.lua, report_and_claim.lua).
--
-- Needs "policy", "declared", "snapshot" and "common" included before it.
--
-- A claim meets its jobs' ids only at the queue heads, so it cannot know
-- them beforehand. Each job's claim is a complete transition, so a claim
-- claims the heads whose keys are declared and stops, before popping, at
-- the first head whose keys are not (the head, or a child's parent): it
-- answers what it claimed plus the ids it needs, and the caller claims the
-- remainder in another call. Its answer also carries hints: the ids at the
-- heads of the queues after it, which the next claim declares so that it
-- seldom needs a second round.

-- How many ids per ready queue a claim peeks at for the next claim's hints
-- (at least; as many as it may claim, up to HINT_MAX).
local HINT_HEADS = 4
local HINT_MAX = 64

-- Queues this script found empty: its later reads and the hints skip them
-- (nothing a claim does queues a job).
local EMPTY = {}

-- What this script read of each ready queue's head, HEADS[key] = {ids,
-- scores, first (the next unclaimed), complete (the read reached the
-- queue's end)}. While a claim runs only its own pops change a queue, so
-- one ZRANGE serves the claim's heads and the next claim's hints.
local HEADS = {}
-- How many ids a first read takes: what this claim may pop and the hints
-- after it (claim_jobs sets it from max_jobs).
local HEAD_READ = HINT_HEADS

local function read_heads(key, n)
  local flat = redis.call('ZRANGE', key, 0, n - 1, 'WITHSCORES')
  local heads = {ids = {}, scores = {}, first = 1, complete = #flat < 2 * n}
  for i = 1, #flat, 2 do
    heads.ids[#heads.ids + 1] = flat[i]
    heads.scores[#heads.scores + 1] = tonumber(flat[i + 1])
  end
  HEADS[key] = heads
  if #flat == 0 then
    EMPTY[key] = true
  end
  return heads
end

-- The head (id, score) of a ready queue, or nil when it is empty.
local function head_of(key)
  if EMPTY[key] then
    return nil
  end
  local heads = HEADS[key]
  if not heads or (heads.first > #heads.ids and not heads.complete) then
    heads = read_heads(key, HEAD_READ)
  end
  if heads.first > #heads.ids then
    EMPTY[key] = true
    return nil
  end
  return heads.ids[heads.first], heads.scores[heads.first]
end

-- Every ready queue of `models`, priority-major.
local function claim_queues(models)
  local keys = {}
  for p = 1, 3 do
    for _, model in ipairs(models) do
      keys[#keys + 1] = queue_key(model, p)
    end
  end
  return keys
end

-- The first `n` ids of every ready queue of `models` not known empty, priority-major.
local function peek_heads(models, n)
  local ids = {}
  for _, key in ipairs(claim_queues(models)) do
    local heads = HEADS[key]
    if not EMPTY[key] and (not heads or (not heads.complete and #heads.ids - heads.first + 1 < n))
    then
      heads = read_heads(key, n)
    end
    if heads then
      for i = heads.first, math.min(#heads.ids, heads.first + n - 1) do
        ids[#ids + 1] = heads.ids[i]
      end
    end
  end
  return ids
end

-- What a claim reads of a queued job, in one HMGET: claim_one's fields and
-- the event's (includes/common.lua emit).
local CLAIM_FIELDS = {'status', 'model', 'run_timeout', 'parent_id', 'weight', 'pool',
  'attempts', 'tenant', 'priority', 'error_code', 'kind', 'create_time'}

-- The claim of `id` touches its hash, its payload and a child's parent: its
-- fields when all are declared, else false (they are asked for).
local function claimable(id)
  if not need_job(id) then
    return false
  end
  local f = redis.call('HMGET', jk(id), unpack(CLAIM_FIELDS))
  local parent_id = f[4]
  if parent_id and parent_id ~= '' and not need_job(parent_id) then
    return false
  end
  return f
end

-- Under fair share, the highest score handed out per model and priority by
-- this claim: the floor new passes start from, raised once per claim.
local HANDED_OUT = {}

local function raise_floors()
  for model, handed in pairs(HANDED_OUT) do
    for priority, score in pairs(handed) do
      raise_floor(model, priority, score)
    end
  end
  HANDED_OUT = {}
end

-- Claim job `id` (popped, its fields `f` from claimable()). One HSET writes
-- the attempt and the field table's claim stamps (store/fields.py).
local function claim_one(id, f, lease_id, worker_id, lease_ms, score, priority)
  local key = jk(id)
  if not f[1] then
    redis.call('ZREM', K_QTIMEOUTS, id)
    redis.call('ZREM', K_RETRIES, id)
    return nil
  end
  if f[1] ~= ST.QUEUED then
    return nil
  end
  redis.call('ZREM', K_QTIMEOUTS, id)
  if (tonumber(f[5]) or 0) > 0 then
    local handed = HANDED_OUT[f[2]] or {}
    HANDED_OUT[f[2]] = handed
    handed[priority] = math.max(handed[priority] or 0, score)
  end
  local deadline = NOW + lease_ms
  local attempts = (tonumber(f[7]) or 0) + 1
  local record = {'status', ST.PROCESSING, 'worker_id', worker_id, 'attempts', attempts,
    'lease_id', lease_id, 'lease_deadline', deadline, 'update_time', NOW_S,
    'cancel_requested', '0', 'outcome', ''}
  for _, name in ipairs(STAMP_ALWAYS.claim or {}) do
    record[#record + 1] = name
    record[#record + 1] = NOW_S
  end
  redis.call('HSET', key, unpack(record))
  for _, name in ipairs(STAMP_ONCE.claim or {}) do
    redis.call('HSETNX', key, name, NOW_S)
  end
  redis.call('ZADD', K_LEASES, deadline, id)
  local run_timeout = tonumber(f[3]) or 0
  if run_timeout > 0 then
    redis.call('ZADD', K_RUN, NOW + run_timeout, id)
  end
  redis.call('HINCRBY', K_INFLIGHT, queue_class(f[2], f[6]), '1')
  emit(id, ST.QUEUED, ST.PROCESSING, {f[4] or '', f[8], f[2], f[9], attempts, worker_id,
    f[10] or '', f[11], f[12]})
  notify('j', id)
  notify('q', f[2])
  local parent_id = f[4]
  local siblings = {}
  if parent_id and parent_id ~= '' then
    local pkey = jk(parent_id)
    local p = redis.call('HMGET', pkey, 'status', 'max_parallel')
    if p[1] == ST.QUEUED then
      redis.call('HSET', pkey, 'status', ST.PROCESSING, 'start_time', NOW_S, 'update_time', NOW_S)
      emit(parent_id, ST.QUEUED, ST.PROCESSING)
      notify('j', parent_id)
    end
    -- a hint for this attempt's end: the held children it may release
    local max_parallel = tonumber(p[2]) or 0
    if max_parallel > 0 then
      siblings = redis.call('ZRANGE', held_key(parent_id), 0, max_parallel - 1)
    end
  end
  return {redis.call('HGETALL', key), redis.call('GET', payload_key(id)) or '',
    lease_id, deadline, siblings}
end

-- The ids at the heads of the ready queues of `models`, for the next claim
-- of up to max_jobs to declare (the parents of children claimed now come
-- from the claimed entries: store/redis/hints.py).
local function head_hints(models, max_jobs)
  return peek_heads(models, math.min(math.max(HINT_HEADS, max_jobs), HINT_MAX))
end

-- Claim up to max_jobs from the ready queues of the declared queue classes
-- (`models`, a list: store/policy.py claim_classes), in one order across them
-- within a priority (the lowest score, then the lowest id), taking lease ids
-- from ARGV[lease_at ..]. When it stops at an undeclared head it asks for
-- the first `peek` ids of every queue (the caller asks for more after a
-- round lost its heads to other claimers). Returns the claimed entries, their
-- {id, lease_id, deadline} leases, and the ids it stopped for (empty when it
-- did not stop). One EXISTS first: a claim with nothing queued reads no queue.
local function claim_jobs(models, max_jobs, worker_id, lease_ms, lease_at, peek)
  local claimed = {}
  local leases = {}
  local queues = claim_queues(models)
  HEAD_READ = math.min(max_jobs + math.max(HINT_HEADS, max_jobs), 2 * HINT_MAX)
  if redis.call('EXISTS', unpack(queues)) == 0 then
    for _, key in ipairs(queues) do
      EMPTY[key] = true
    end
    return claimed, leases, NEED_IDS
  end
  for p = 1, 3 do
    while #claimed < max_jobs do
      -- the head with the lowest (score, id) among this priority's queues
      local best_key, best_score, best_id
      for _, model in ipairs(models) do
        local key = queue_key(model, p)
        local id, score = head_of(key)
        if score and (not best_score or score < best_score
            or (score == best_score and id < best_id)) then
          best_key, best_score, best_id = key, score, id
        end
      end
      if not best_key then
        break
      end
      local f = claimable(best_id)
      if not f then
        -- ask for every id the rest of this claim may meet, not just this one
        for _, id in ipairs(peek_heads(models, math.max(peek, max_jobs - #claimed))) do
          need_job(id)
        end
        raise_floors()
        return claimed, leases, NEED_IDS
      end
      local id = redis.call('ZPOPMIN', best_key)[1]
      HEADS[best_key].first = HEADS[best_key].first + 1  -- the head just read
      local job = claim_one(id, f, ARGV[lease_at + #claimed], worker_id, lease_ms, best_score, p)
      if job then
        claimed[#claimed + 1] = job
        leases[#leases + 1] = {id, job[3], job[4]}
      end
    end
  end
  raise_floors()
  return claimed, leases, NEED_IDS
end

-- The claim entries of recorded leases still held (a resend's answer: the
-- resend declares what the first run declared, so every id is declared).
local function replay_leases(recorded)
  local replay = {}
  for _, lease in ipairs(cjson.decode(recorded)) do
    local key = jk(lease[1])
    if redis.call('HGET', key, 'lease_id') == lease[2] then
      replay[#replay + 1] = {redis.call('HGETALL', key),
        redis.call('GET', payload_key(lease[1])) or '', lease[2], lease[3]}
    end
  end
  return replay
end
