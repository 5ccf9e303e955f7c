-- includes/claim_jobs.lua: claim queued jobs (claim.lua, report_and_claim.lua).
--
-- Needs "keys", "policy", "snapshot" and "common" included before it.

local function claim_one(id, lease_id, worker_id, lease_ms)
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


-- Claim up to max_jobs from the ready queues KEYS[first .. first + 3 *
-- n_models - 1] (priority-major), taking lease ids from ARGV[lease_at ..].
-- Returns the claimed entries and their {id, lease_id, deadline} leases.
local function claim_jobs(first, n_models, max_jobs, worker_id, lease_ms, lease_at)
  local claimed = {}
  local leases = {}
  for p = 1, 3 do
    while #claimed < max_jobs do
      -- the head with the lowest sequence among this priority's queues
      local best_key, best_score
      for m = 1, n_models do
        local key = KEYS[first - 1 + (p - 1) * n_models + m]
        local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        if head[1] and (not best_score or tonumber(head[2]) < best_score) then
          best_key, best_score = key, tonumber(head[2])
        end
      end
      if not best_key then
        break
      end
      local id = redis.call('ZPOPMIN', best_key)[1]
      local job = claim_one(id, ARGV[lease_at + #claimed], worker_id, lease_ms)
      if job then
        claimed[#claimed + 1] = job
        leases[#leases + 1] = {id, job[3], job[4]}
      end
    end
  end
  return claimed, leases
end

-- The claim entries of recorded leases still held (a resend's answer).
local function replay_leases(recorded)
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
