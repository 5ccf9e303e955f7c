--[[
  Count the ready jobs of one partition that claims take before a job of
  another partition (store/redis_partitioned.py): claims across partitions
  take the highest priority first, then the oldest id (a ULID begins with
  its submit time).

  Input:
    KEYS[1]     the ready queue (zset, id by submit sequence) of the job's
                model and priority, in this partition
    KEYS[2..]   the ready queues of the job's model at each higher priority,
                in this partition
    ARGV[1]     the job's id

  Output:
    n: every job in KEYS[2..], plus those of KEYS[1] whose ids sort before
    ARGV[1], found by binary search over ranks (exact while the queue's ids
    increase along its sequence, as one gateway's submits do).

  Transitions: none (read only). Cost: O(log^2 N) + O(priorities).
]]

local ahead = 0
for i = 2, #KEYS do
  ahead = ahead + redis.call('ZCARD', KEYS[i])
end
local low, high = 0, redis.call('ZCARD', KEYS[1])
while low < high do
  local middle = math.floor((low + high) / 2)
  local member = redis.call('ZRANGE', KEYS[1], middle, middle)[1]
  if member < ARGV[1] then
    low = middle + 1
  else
    high = middle
  end
end
return ahead + low
