-- includes/plan.lua: the reads a script does before its first write, to
-- find every job and model its writes will touch (includes/declared.lua).
-- Needs "policy" and "declared" first.
--
-- A plan may ask for more than the writes use (declaring a key costs
-- little), never less: a write to an undeclared key is an error().
-- Plans read only declared keys; what an undeclared record would tell
-- (its model, its parent) is asked for in the next round.

-- The fields plans use of job `id` (and the lease fields a worker's call
-- checks, in the same HMGET), or nil: undeclared (now asked for) or gone.
local function plan_read(id)
  if not need_job(id) then
    return nil
  end
  local f = redis.call('HMGET', jk(id), 'status', 'kind', 'model', 'parent_id', 'idem_ref',
    'child_models', 'pool', 'lease_id', 'outcome', 'cancel_requested', 'attempts', 'op',
    'priority', 'tenant', 'worker_id', 'create_time')
  if not f[1] then
    return nil
  end
  return {status = f[1], kind = f[2], model = f[3] or '', parent_id = f[4] or '',
    idem_ref = f[5] or '', child_models = f[6], pool = f[7] or '', lease_id = f[8],
    outcome = f[9], cancel_requested = f[10], attempts = f[11], op = f[12],
    priority = f[13], tenant = f[14], worker_id = f[15] or '', create_time = f[16]}
end

-- The queues a job of (model, pool) waits in, and its model's fair-share
-- hash (the any-pool class's group holds it): both asked for.
local function need_class(model, pool)
  need_model(model)
  if pool and pool ~= '' then
    need_model(queue_class(model, pool))
  end
end

-- snapshot(id) reads the job, its model's queues while it is QUEUED and a
-- group's children.
local function plan_snapshot(id)
  local j = plan_read(id)
  if not j then
    return
  end
  if j.kind == KIND.GROUP then
    for _, cid in ipairs(redis.call('LRANGE', children_key(id), 0, -1)) do
      need_job(cid)
    end
  elseif j.status == ST.QUEUED then
    need_class(j.model, j.pool)
  end
end

-- Every child of group `gid` (record `g`) with its model: a group's cancel,
-- or its end expiring them all. The group record lists its children's
-- queue classes (child_models), so they come in the same round as the children.
local function plan_children(gid, g)
  if g.child_models then
    for _, model in ipairs(cjson.decode(g.child_models)) do
      need_model(model)
    end
  end
  for _, cid in ipairs(redis.call('LRANGE', children_key(gid), 0, -1)) do
    local c = plan_read(cid)
    if c then
      need_class(c.model, c.pool)
      need_key(c.idem_ref)
    end
  end
end

-- Groups with children this script may end, and how many of them.
local PLAN_PARENTS = {}
local PLAN_ENDS = {}

local function plan_reset()
  PLAN_PARENTS = {}
  PLAN_ENDS = {}
end

-- Job `id` may change status in this script (end, requeue, retry, release):
-- its record, its queues, its idempotency key (expired with it), a group's
-- children; a child's parent is planned by plan_groups().
local function plan_transition(id, read)
  local j = read or plan_read(id)
  if not j then
    return
  end
  need_key(j.idem_ref)
  if j.kind == KIND.GROUP then
    plan_children(id, j)
  else
    need_class(j.model, j.pool)
  end
  local parent_id = j.parent_id
  if parent_id ~= '' then
    if not PLAN_ENDS[parent_id] then
      PLAN_PARENTS[#PLAN_PARENTS + 1] = parent_id
      PLAN_ENDS[parent_id] = 0
    end
    PLAN_ENDS[parent_id] = PLAN_ENDS[parent_id] + 1
  end
end

-- The HELD children release_held() may queue: the first `room` live ones
-- (popped orphans are dropped and do not count).
local function plan_held(pid, room)
  local counted, offset = 0, 0
  while counted < room do
    local ids = redis.call('ZRANGE', held_key(pid), offset, offset + room - 1)
    if #ids == 0 then
      return
    end
    for _, cid in ipairs(ids) do
      if counted >= room then
        return
      end
      local c = plan_read(cid)
      if not D_JOB[cid] then
        counted = counted + 1  -- asked for; counted as live
      elseif c and c.status == ST.HELD then
        counted = counted + 1
        need_class(c.model, c.pool)
      end
    end
    offset = offset + #ids
  end
end

-- After plan_transition() of every job: what those children's ends do to
-- their groups (child_ended): the parent, the held children it may
-- release, and every child when the group may end.
local function plan_groups()
  for _, pid in ipairs(PLAN_PARENTS) do
    local p = plan_read(pid)
    if p then
      need_key(p.idem_ref)
      local ends = PLAN_ENDS[pid]
      local g = redis.call('HMGET', jk(pid), 'max_parallel', 'active', 'total', 'done')
      local max_parallel, active = tonumber(g[1]) or 0, tonumber(g[2]) or 0
      local total, done = tonumber(g[3]) or 0, tonumber(g[4]) or 0
      if done + ends >= total then
        plan_children(pid, p)
      elseif max_parallel > 0 and not TERMINAL[p.status] then
        plan_held(pid, math.max(max_parallel - active + ends, 0))
      end
    end
  end
end

-- The plan's end for a script whose transitions were all planned:
-- plan_groups(), then keys_needed() (the reply asking for more keys, or nil).
local function finish_plan()
  plan_groups()
  return keys_needed()
end
