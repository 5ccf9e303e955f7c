-- includes/common.lua: the state machine's shared steps, for transition scripts.
--
-- Every transition script passes the same first KEYS and ARGV:
--   KEYS[1]  events          stream     audit trail (XADD MAXLEN ~)
--   KEYS[2]  leases          zset       PROCESSING ids by lease deadline (ms)
--   KEYS[3]  run_deadlines   zset       PROCESSING ids by run-timeout deadline (ms)
--   KEYS[4]  retries         zset       delayed QUEUED ids by due time (ms)
--   KEYS[5]  queue_timeouts  zset       QUEUED ids by queue-timeout deadline (ms)
--   KEYS[6]  live            hash       tenant -> live job count
--   KEYS[7]  live_total      string     live job count, all tenants
--   KEYS[8]  in_flight       hash       queue class -> PROCESSING count
--   KEYS[9]  models          set        every model seen
--   KEYS[10] seq             string     the last ready-queue score handed out (microseconds, next_seq)
--   ARGV[1]  ready channel   the partition's pub/sub channel for "r" (not a key)
--   ARGV[2]  changes channel the partition's pub/sub channel for "j" and "q"
--   ARGV[3]  events_max_length
--   ARGV[4]  result_ttl in ms
--
-- Per-job and per-class keys (job hash, payload, result, children, held,
-- ready queues, fair-share hash) are the declared ones (includes/declared.lua,
-- included before this file): jk(id), queue_key(class, priority), fair_key...
--
-- Notifications (PUBLISH; SPUBLISH on Redis Cluster, where both channels
-- carry the partition's hash tag, so they are in the script's slot as Redis
-- requires), split by audience so a server subscribes only to what it
-- waits for (store/redis_notify.py): on the ready channel (ARGV[1]; claims)
-- "r <model> <id>" job <id> became claimable (the id is a hint for the next
-- claim); on the changes channel (ARGV[2]; watchers, event follows)
-- "q <model>" a ready queue shrank (queue positions moved) and "j <id>" the
-- job's snapshot changed.
--
-- Out of memory: the transitions that must run to completion under OOM
-- (heartbeat, set_result, report_and_claim, cancel, release) start with
-- `#!lua flags=allow-oom`. The others run without a shebang, in Redis 7's
-- compatibility mode, where OOM is checked only at the first DENYOOM
-- command (HSET, ZADD, XADD, INCR...) issued before the script wrote
-- anything: a claim starts its writes with ZPOPMIN and recovery with ZREM,
-- so they run on; submit deliberately starts with next_score's SET or
-- HSET, so under OOM it is refused before changing anything.

--- @include "publish"
local READY_CHANNEL = ARGV[1]
local CHANGES_CHANNEL = ARGV[2]
local EVENTS_MAXLEN = ARGV[3]
local RESULT_TTL_MS = tonumber(ARGV[4])
-- the same as the caller wrote it, for PEXPIRE and PX (no number to format)
local RESULT_TTL_PX = ARGV[4]
local K_EVENTS = KEYS[1]
local K_LEASES = KEYS[2]
local K_RUN = KEYS[3]
local K_RETRIES = KEYS[4]
local K_QTIMEOUTS = KEYS[5]
local K_LIVE = KEYS[6]
local K_LIVE_TOTAL = KEYS[7]
local K_INFLIGHT = KEYS[8]
local K_MODELS = KEYS[9]
local K_SEQ = KEYS[10]

-- NOW_S is NOW's digits, built from TIME's strings: the store writes it
-- (update_time, end_time, the event's time...) as a string, because Redis
-- 7.0 turns every Lua number given to redis.call into text with
-- printf("%.17g"), the costliest step of a short command. For the same
-- reason constant numbers go to redis.call as strings ('0', '1').
local NOW, NOW_US, NOW_S
do
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  NOW_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
  NOW_S = t[1] .. string.sub(string.rep('0', 6 - #t[2]) .. t[2], 1, 3)
end

-- The next ready-queue score ("seq") of this partition: its clock in
-- microseconds, strictly above the last score handed out, max(last + 1,
-- now). Strictly increasing, so FIFO within the partition is what a counter
-- gave; a clock, so scores of different partitions compare (claims across
-- partitions take the lowest, position_elsewhere.lua counts with ZCOUNT).
-- Below 2^53 until the year 2255, so exact in a double and in Lua; formatted
-- with %.0f because Lua's tostring keeps only 14 digits. The SET is DENYOOM:
-- submit's first write.
local function next_seq()
  local last = tonumber(redis.call('GET', K_SEQ) or '0') or 0
  local seq = string.format('%.0f', math.max(last + 1, NOW_US))
  redis.call('SET', K_SEQ, seq)
  return seq
end


-- A new ready-queue score for a job of `model`, `priority` and `tenant`
-- submitted with `weight`. Weight 0 (fair share off): the partition's clock,
-- next_seq: one FIFO order across tenants. Otherwise its pass
-- (store/policy.py next_pass, docs/fair-share.md): max(the tenant's last
-- pass, the pass last handed out for the model and priority, `hint`) plus
-- PASS_UNIT / weight, so FIFO within a tenant, tenants interleaved in
-- proportion to their weights, and an idle tenant banks no credit. The
-- state is the model's fair hash (fair_key(model): the any-pool class must
-- be declared): one HMGET and one HSET, the HSET being DENYOOM.
local function next_score(model, priority, tenant, weight, hint)
  weight = tonumber(weight) or 0
  if weight <= 0 then
    return next_seq()
  end
  local fair = fair_key(model)
  local last_field = 'pass:' .. priority .. ':' .. tenant
  local f = redis.call('HMGET', fair, 'floor:' .. priority, last_field)
  local floor = math.max(tonumber(f[1]) or 0, tonumber(hint) or 0)
  local pass = string.format('%.0f', next_pass(tonumber(f[2]) or 0, floor, weight))
  redis.call('HSET', fair, last_field, pass)
  return pass
end

-- A claim handed out `score` for (model, priority): raise the floor new
-- passes start from (fair share only; called once per claim and priority).
local function raise_floor(model, priority, score)
  local fair = fair_key(model)
  local field = 'floor:' .. priority
  if score > (tonumber(redis.call('HGET', fair, field)) or 0) then
    redis.call('HSET', fair, field, string.format('%.0f', score))
  end
end

--- @include "index"

-- Who makes this script's transitions when it is not the job's own tenant
-- (an admin's Cancel or RetryJob: "admin:ops"); set by the script, written
-- into each event it emits as "actor" (absent when empty).
local ACTOR = ''

local NOTIFIED = {}
local function notify(kind, what)
  local message = kind .. ' ' .. what
  if not NOTIFIED[message] then
    NOTIFIED[message] = true
    redis.call(PUBLISH, kind == 'r' and READY_CHANNEL or CHANGES_CHANNEL, message)
  end
end

-- The events this script appended, each {stream id, field, value, ...}.
-- Call after the record is updated: the event carries its new fields. A
-- caller that knows them passes `known` ({parent_id, tenant, model,
-- priority, attempts, worker_id, error_code, kind, create_time}, in that
-- order) and spares the read; kind and create_time place it in ListJobs'
-- index (includes/index.lua).
local EVENT_FIELDS = {'parent_id', 'tenant', 'model', 'priority', 'attempts', 'worker_id',
  'error_code', 'kind', 'create_time'}
local EMITTED = {}
local function emit(id, from, to, known)
  local f = known or redis.call('HMGET', jk(id), unpack(EVENT_FIELDS))
  local fields = {
    'job_id', id, 'parent_job_id', f[1] or '', 'tenant', f[2] or '', 'model', f[3] or '',
    'priority', f[4] or '', 'from', from or '', 'to', to, 'attempts', f[5] or '0',
    'worker_id', f[6] or '', 'error_code', f[7] or '', 'time', NOW_S}
  if ACTOR ~= '' then
    fields[#fields + 1] = 'actor'
    fields[#fields + 1] = ACTOR
  end
  local sid = redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*', unpack(fields))
  index_moved(id, from, to, f[2], f[8], f[9])
  local entry = {sid}
  for i = 1, #fields do
    entry[#entry + 1] = fields[i]
  end
  EMITTED[#EMITTED + 1] = entry
end

-- store/policy.py retry_delay, in Lua (tests/store/test_policy.py compares them)
local function backoff_ms(attempts, base_ms, max_ms)
  local delay = base_ms * 2 ^ (math.max(attempts, 1) - 1)
  return math.min(delay, max_ms)
end

-- A PROCESSING job of queue class `class` gives up its lease (it stays live).
local function leave_processing(id, class)
  redis.call('ZREM', K_LEASES, id)
  redis.call('ZREM', K_RUN, id)
  redis.call('HINCRBY', K_INFLIGHT, class, '-1')
end

-- HELD or PROCESSING -> QUEUED, claimable now (delay 0) or after delay_ms.
-- A job takes the next score (next_score) when it is first queued; a
-- requeued job keeps its own, so it goes back to its place.
local function to_queued(id, from, delay_ms)
  local key = jk(id)
  local f = redis.call('HMGET', key, 'model', 'priority', 'seq', 'queue_timeout', 'pool',
    'tenant', 'weight', 'parent_id', 'attempts', 'worker_id', 'error_code', 'kind',
    'create_time')
  local seq = f[3]
  if not seq or seq == '' or seq == '0' then
    seq = next_score(f[1], f[2], f[6], f[7])
  end
  redis.call('HSET', key, 'status', ST.QUEUED, 'update_time', NOW_S, 'seq', seq)
  local queue_timeout = tonumber(f[4]) or 0
  if queue_timeout > 0 then
    redis.call('ZADD', K_QTIMEOUTS, NOW + queue_timeout, id)
  end
  if delay_ms > 0 then
    redis.call('ZADD', K_RETRIES, NOW + delay_ms, id)
  else
    local class = queue_class(f[1], f[5])
    redis.call('ZADD', queue_key(class, f[2]), seq, id)
    notify('r', class .. ' ' .. id)
  end
  emit(id, from, ST.QUEUED, {f[8], f[6], f[1], f[2], f[9], f[10], f[11], f[12], f[13]})
  notify('j', id)
end

-- Release HELD children (lowest index first) while the group has room.
local function release_held(parent_id)
  local pkey = jk(parent_id)
  local p = redis.call('HMGET', pkey, 'max_parallel', 'active', 'status')
  if not p[3] or TERMINAL[p[3]] then
    return
  end
  local max_parallel = tonumber(p[1]) or 0
  local active = tonumber(p[2]) or 0
  local released = false
  while max_parallel == 0 or active < max_parallel do
    local popped = redis.call('ZPOPMIN', held_key(parent_id))
    if #popped == 0 then
      break
    end
    local cid = popped[1]
    -- an orphan id (record expired or deleted) is dropped, never recreated
    if redis.call('HGET', jk(cid), 'status') == ST.HELD then
      active = active + 1
      released = true
      to_queued(cid, ST.HELD, 0)
    end
  end
  if released then
    redis.call('HSET', pkey, 'active', active)
  end
end

-- The record, payload, result and idempotency key of job `id` get the
-- result TTL. A caller that read the record's idem_ref passes it (false:
-- none), and `result_set` false when it knows no result key exists or has
-- its TTL; `indexed` as index_expiring's.
local function expire_job(id, idem, result_set, indexed)
  local key = jk(id)
  index_expiring(id, RESULT_TTL_MS, indexed)
  redis.call('PEXPIRE', key, RESULT_TTL_PX)
  redis.call('PEXPIRE', payload_key(id), RESULT_TTL_PX)
  if result_set ~= false then
    redis.call('PEXPIRE', result_key(id), RESULT_TTL_PX)
  end
  if idem == nil then
    idem = redis.call('HGET', key, 'idem_ref')
  end
  if idem and idem ~= '' then
    redis.call('PEXPIRE', declared_key(idem), RESULT_TTL_PX)
  end
end

-- Once a group's parent and every child are terminal they expire together.
local function expire_group(parent_id)
  expire_job(parent_id)
  redis.call('PEXPIRE', children_key(parent_id), RESULT_TTL_PX)
  redis.call('DEL', held_key(parent_id))
  for _, cid in ipairs(redis.call('LRANGE', children_key(parent_id), 0, -1)) do
    expire_job(cid)
  end
end

local function group_done(parent_id)
  local p = redis.call('HMGET', jk(parent_id), 'total', 'done')
  return tonumber(p[2]) >= tonumber(p[1])
end

local finish

-- Group bookkeeping when a child reaches a terminal status.
local function child_ended(parent_id, status, was_active)
  local pkey = jk(parent_id)
  if redis.call('EXISTS', pkey) == 0 then
    return
  end
  redis.call('HINCRBY', pkey, 'done', 1)
  if status == ST.COMPLETED then
    redis.call('HINCRBY', pkey, 'completed', 1)
  end
  if was_active then
    redis.call('HINCRBY', pkey, 'active', -1)
  end
  local p = redis.call('HMGET', pkey, 'total', 'done', 'completed', 'status')
  local total, done, completed = tonumber(p[1]), tonumber(p[2]), tonumber(p[3])
  notify('j', parent_id)
  if TERMINAL[p[4]] then
    if done >= total then
      expire_group(parent_id)
    end
    return
  end
  redis.call('HSET', pkey, 'progress', tostring(done / total), 'update_time', NOW_S)
  release_held(parent_id)
  if done >= total then
    -- store/policy.py group_outcome, in Lua
    local final, message = ST.COMPLETED, ''
    if completed < total then
      final = completed == 0 and ST.FAILED or ST.PARTIAL
      message = group_message(total - completed, total)
    end
    finish(parent_id, final, '', message)
  end
end

-- Any live status -> a terminal one: drop every index entry, free the live
-- counters, record the event, set the TTLs, do the group bookkeeping.
-- `extra`: more field/value pairs for the record, written in the same HSET
-- (an attempt's outcome, its result's content type...); `result_set` as
-- expire_job's. A caller that read the record with plan_read (and wrote
-- nothing to it since) passes that read as `known` and spares this one.
finish = function(id, status, error_code, error_message, extra, result_set, known)
  local key = jk(id)
  local f
  if known then
    f = {known.status, known.kind, known.model, known.priority, known.tenant, known.parent_id,
      known.pool, known.attempts, known.worker_id, known.idem_ref, known.create_time}
  else
    f = redis.call('HMGET', key, 'status', 'kind', 'model', 'priority', 'tenant',
      'parent_id', 'pool', 'attempts', 'worker_id', 'idem_ref', 'create_time')
  end
  local from, kind, model, tenant, parent_id = f[1], f[2], f[3], f[5], f[6]
  if not from or TERMINAL[from] then
    return
  end
  -- only the index sets a job of that status is in
  if kind == KIND.GROUP then
    -- a parent is in none
  elseif from == ST.QUEUED then
    redis.call('ZREM', K_RETRIES, id)
    redis.call('ZREM', K_QTIMEOUTS, id)
    redis.call('ZREM', queue_key(queue_class(model, f[7]), f[4]), id)
    notify('q', model)
  elseif from == ST.HELD then
    redis.call('ZREM', held_key(parent_id), id)
  elseif from == ST.PROCESSING then
    redis.call('ZREM', K_LEASES, id)
    redis.call('ZREM', K_RUN, id)
    redis.call('HINCRBY', K_INFLIGHT, queue_class(model, f[7]), '-1')
  end
  if kind ~= KIND.GROUP then
    redis.call('HINCRBY', K_LIVE, tenant, '-1')
    redis.call('DECR', K_LIVE_TOTAL)
  end
  local record = {'status', status, 'end_time', NOW_S, 'update_time', NOW_S,
    'error_code', error_code, 'error_message', error_message}
  for _, value in ipairs(extra or {}) do
    record[#record + 1] = value
  end
  redis.call('HSET', key, unpack(record))
  emit(id, from, status, {parent_id or '', tenant, model, f[4], f[8], f[9], error_code, kind,
    f[11]})
  notify('j', id)
  if kind == KIND.GROUP then
    if group_done(id) then
      expire_group(id)
    end
  elseif kind == KIND.CHILD then
    child_ended(parent_id, status, from == ST.QUEUED or from == ST.PROCESSING)
  else
    if result_set == nil then
      result_set = status == ST.COMPLETED  -- only a completed job may have a result
    end
    expire_job(id, f[10] or false, result_set,
      {tenant, status, kind, f[11], model})
  end
end

-- A PROCESSING attempt failed in a way that may be retried (retryable
-- failure, lease expiry, run timeout): requeue it after delay_ms, or end it
-- FAILED with ATTEMPTS_EXHAUSTED past max_attempts.
local function retry_or_exhaust(id, error_code, error_message, delay_ms, extra)
  local key = jk(id)
  local f = redis.call('HMGET', key, 'attempts', 'max_attempts', 'model', 'parent_id', 'pool')
  -- a running child may finish its attempt after its group was cancelled,
  -- but a retry would queue work for a cancelled group
  if f[4] and f[4] ~= '' and redis.call('HGET', jk(f[4]), 'status') == ST.CANCELLED then
    finish(id, ST.CANCELLED, ERR.CANCELLED, MSG_GROUP_CANCELLED, extra)
    return
  end
  if tonumber(f[1]) >= tonumber(f[2]) then
    local message = error_code
    if error_message ~= '' then
      message = exhausted_message_of(error_code, error_message)
    end
    finish(id, ST.FAILED, ERR.ATTEMPTS_EXHAUSTED, message, extra)
    return
  end
  local record = {'error_code', error_code, 'error_message', error_message}
  for _, value in ipairs(extra or {}) do
    record[#record + 1] = value
  end
  redis.call('HSET', key, unpack(record))
  leave_processing(id, queue_class(f[3], f[5]))
  to_queued(id, ST.PROCESSING, delay_ms)
end
