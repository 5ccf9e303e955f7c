-- includes/snapshot.lua: read helpers shared by every script that returns a job.
-- Needs the `policy` and `declared` includes first. The keys read here (the
-- job hash, its result, children list, its children's hashes, the ready
-- queues of its model while it is QUEUED) must be declared: plan_snapshot()
-- (includes/plan.lua) asks for them.

-- Jobs the same workers claim before the job of (model, priority, seq):
-- every higher-priority ready job of the model plus the ready jobs of its own
-- queue with a lower sequence. O(log N) per queue.
local function queue_position(model, priority, seq)
  priority = tonumber(priority)
  local n = redis.call('ZCOUNT', queue_key(model, priority), '-inf', '(' .. seq)
  for p = 1, priority - 1 do
    n = n + redis.call('ZCARD', queue_key(model, p))
  end
  return n
end

-- {record (flat HGETALL), position or -1, result bytes, children (flat:
-- id, child_index, status, error_code, ...)}; nil when the record is gone.
local function snapshot(id)
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
    position = queue_position(h['model'], h['priority'], h['seq'])
  end
  local result = redis.call('GET', result_key(id)) or ''
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
