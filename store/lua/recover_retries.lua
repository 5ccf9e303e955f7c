--[[
  Retries whose backoff ended: the QUEUED job becomes claimable at its place.

  Input:
    KEYS[1..], ARGV[1..5]  the recovery input (includes/recover.lua): transition
                           keys, declared job and model groups, ARGV[5] the limit

  Reads only what is due (ZRANGEBYSCORE retries -inf now LIMIT).

  Output:
    {handled, {}, needed}  no status changes (the job was QUEUED already);
    needed as recover_leases

  Transitions: none; the id moves into its ready queue (same sequence).
  Publishes "r <model> <id>".
]]
--- @include "policy"
--- @include "declared"
--- @include "common"
--- @include "plan"
--- @include "recover"

-- a retry's end touches only the job and its model's ready queue
local function plan_retry(id)
  local j = plan_read(id)
  if j then
    need_class(j.model, j.pool)
  end
end

local handled = handle_due(due_ids(K_RETRIES, tonumber(ARGV[5])), plan_retry, function(id)
  redis.call('ZREM', K_RETRIES, id)
  local f = redis.call('HMGET', jk(id), 'status', 'model', 'priority', 'seq', 'pool')
  if not f[1] then
    redis.call('ZREM', K_QTIMEOUTS, id)
  elseif f[1] == ST.QUEUED then
    local class = queue_class(f[2], f[5])
    redis.call('ZADD', queue_key(class, f[3]), f[4], id)
    notify('r', class .. ' ' .. id)
    notify('j', id)
  end
end)
return recover_reply(handled)
