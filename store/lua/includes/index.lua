-- includes/index.lua: ListJobs' indexes, kept by the transitions themselves
-- (store/listing.py has the walks, docs/list-jobs.md the layout and costs).
-- Included by common.lua (after NOW, before emit); needs "policy" and
-- "declared" first.
--
-- Two fixed keys of the partition sit just before the declared groups
-- (store/redis/calls.py appends them to every transition's own KEYS), at
-- key_at - 2 and key_at - 1 (key_at: the declaration tail's first job-group
-- index, includes/declared.lua):
--   index:status    zset, every score 0, ordered by member:
--                   "<tenant>|<S><K><create ms, 13 digits><id>"; a run per
--                   (tenant, status, kind) is one member prefix. Every job is
--                   in exactly one run; emit() moves it with its status.
--   index:expiring  list, in the order jobs were given their TTL:
--                   "<due ms> <index:status member> <model>"; recovery drains
--                   it (unindex_expired.lua) once records are gone.
-- Per (tenant, model): index:model:<tenant>:<model>, zset "<create ms><id>",
-- filled by submit (its spec names the key: a declared raw key) and emptied
-- by the drain.

-- store/redis/listing.py STATUS_CODES and KIND_CODES (tests/store/test_redis_index.py
-- holds them equal)
local INDEX_STATUS = {held = 'h', queued = 'q', processing = 'p', completed = 'c',
  failed = 'f', cancelled = 'x', partial = 'r'}
local INDEX_KIND = {single = 's', group = 'g', child = 'c'}

local K_INDEX_STATUS, K_INDEX_EXPIRING
do
  local key_at = tonumber(ARGV[#ARGV - 3])
  K_INDEX_STATUS, K_INDEX_EXPIRING = KEYS[key_at - 2], KEYS[key_at - 1]
  local function ends(name, suffix)
    return name and string.sub(name, -#suffix) == suffix
  end
  if not ends(K_INDEX_STATUS, ':index:status') or not ends(K_INDEX_EXPIRING, ':index:expiring')
  then
    error('the index keys are not before the declared groups in KEYS')
  end
end

-- A create time (ms, a number or the record's digits) as 13 digits, so members sort by it.
local function index_ms(ms)
  local digits = type(ms) == 'number' and string.format('%.0f', ms) or ms
  return string.rep('0', 13 - #digits) .. digits
end

local function index_member(tenant, status, kind, created, id)
  return tenant .. '|' .. INDEX_STATUS[status] .. INDEX_KIND[kind] .. index_ms(created) .. id
end

-- The member index_moved() last gave each job in this script: its
-- current one, which index_expiring() then reuses instead of building it again.
local INDEXED = {}

-- emit()'s upkeep: the job left status `from` (nil: it was just created) for `to`.
local function index_moved(id, from, to, tenant, kind, created)
  if from and from ~= '' and from ~= to then
    redis.call('ZREM', K_INDEX_STATUS, index_member(tenant, from, kind, created, id))
  end
  local member = index_member(tenant, to, kind, created, id)
  INDEXED[id] = member
  redis.call('ZADD', K_INDEX_STATUS, '0', member)
end

-- submit's upkeep: the new job in its (tenant, model) run (`model_index`: that key's name).
local function index_created(id, model_index, created)
  redis.call('ZADD', declared_key(model_index), '0', index_ms(created) .. id)
end

-- expire_job()'s upkeep: the job's record expires in ttl_ms; the drain then
-- takes it out of its runs. A caller that knows the record passes `known`
-- ({tenant, status, kind, create_time, model}) and spares the read.
local function index_expiring(id, ttl_ms, known)
  local f = known or redis.call('HMGET', jk(id), 'tenant', 'status', 'kind', 'create_time',
    'model')
  if not f[1] then
    return
  end
  local member = INDEXED[id] or index_member(f[1], f[2], f[3], f[4], id)
  redis.call('RPUSH', K_INDEX_EXPIRING, string.format('%.0f', NOW + ttl_ms) .. ' ' ..
    member .. ' ' .. (f[5] or ''))
end
