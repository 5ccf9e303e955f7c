-- includes/snapshot.lua: read helpers shared by every script that returns a job.
-- Needs the `policy` and `declared` includes first. The keys read here (the
-- job hash, its result, children list, its children's hashes, the ready
-- queues of its model while it is QUEUED) must be declared: plan_snapshot()
-- (includes/plan.lua) asks for them.

-- Ready jobs of `queue` claimed before (score, id): a lower score, or the
-- same score and a lower id (claims break ties by id). O(log N) plus the
-- ties, which only fair share makes (two tenants' equal passes).
local function ahead_in(queue, score, id)
  local n = redis.call('ZCOUNT', queue, '-inf', '(' .. score)
  for _, tied in ipairs(redis.call('ZRANGEBYSCORE', queue, score, score)) do
    if tied < id then
      n = n + 1
    end
  end
  return n
end

-- Jobs the same workers claim before job `id` of (model, priority, score),
-- bound to `pool`: of its own and higher priorities, the ready jobs of its
-- queue class claimed before it; for a pool's job, also the any-pool ones
-- (its workers claim both, in one order). O(log N) per queue.
local function queue_position(id, model, priority, score, pool)
  priority = tonumber(priority)
  local classes = {queue_class(model, pool)}
  if pool and pool ~= '' then
    classes[2] = model
  end
  local n = 0
  for i, class in ipairs(classes) do
    if i == 1 then  -- its own queue: its rank, ties by id as claims break them
      n = n + (redis.call('ZRANK', queue_key(class, priority), id) or 0)
    else
      n = n + ahead_in(queue_key(class, priority), score, id)
    end
    for p = 1, priority - 1 do
      n = n + redis.call('ZCARD', queue_key(class, p))
    end
  end
  return n
end

-- {record (flat HGETALL), position or -1, result bytes, children (flat:
-- id, child_index, status, error_code, ...)}; nil when the record is gone.
-- A caller that knows the stored result (it reported it) passes `result`
-- and spares the read.
local function snapshot(id, result)
  local key = jk(id)
  local rec = redis.call('HGETALL', key)
  if #rec == 0 then
    return nil
  end
  local h = {}
  for i = 1, #rec, 2 do
    h[rec[i]] = rec[i + 1]
  end
  local position = -1
  if h['status'] == ST.QUEUED and h['kind'] ~= KIND.GROUP then
    position = queue_position(id, h['model'], h['priority'], h['seq'], h['pool'])
  end
  if h['status'] ~= ST.COMPLETED then  -- only a completed job may have a result
    result = ''
  elseif result == nil then
    result = redis.call('GET', result_key(id)) or ''
  end
  local kids = {}
  if h['kind'] == KIND.GROUP then
    for _, cid in ipairs(redis.call('LRANGE', children_key(id), 0, -1)) do
      local c = redis.call('HMGET', jk(cid), 'child_index', 'status', 'error_code')
      if c[2] then
        kids[#kids + 1] = cid
        kids[#kids + 1] = c[1]
        kids[#kids + 1] = c[2]
        kids[#kids + 1] = c[3] or ''
      end
    end
  end
  return {rec, position, result, kids}
end
