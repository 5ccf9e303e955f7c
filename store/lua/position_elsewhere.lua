--[[
  Count the ready jobs of one partition that claims take before a job of
  another partition (store/redis_partitioned.py): claims across partitions
  take the highest priority first, then the lowest queue score (each
  partition's clock in microseconds, strictly increasing: includes/common.lua
  next_seq), then the lower partition index on equal scores.

  Input:
    KEYS[1]     the ready queue (zset, id by queue score) of the job's model
                and priority, in this partition
    KEYS[2..]   the ready queues of the job's model at each higher priority,
                in this partition
    ARGV[1]     the ZCOUNT max bound: "(<score>" (this partition's job of an
                equal score comes after the job's) or "<score>" (before it)

  Output:
    n: every job in KEYS[2..], plus those of KEYS[1] scored below the bound.
    Exact whatever order the queue's ids are in (scores, not ids, order it).

  Transitions: none (read only). Cost: O(log N) + O(priorities): one ZCOUNT
  and a ZCARD per higher priority, no loop over the queue.
]]

local ahead = redis.call('ZCOUNT', KEYS[1], '-inf', ARGV[1])
for i = 2, #KEYS do
  ahead = ahead + redis.call('ZCARD', KEYS[i])
end
return ahead
