--[[
  Count the ready jobs of one partition that claims take before a job of
  another partition (store/redis/engine.py): claims across partitions
  take the highest priority first, then the lowest queue score (each
  partition's clock in microseconds, strictly increasing: includes/common.lua
  next_seq), then the lower partition index on equal scores.

  Input:
    KEYS[1..k]  the ready queues (zset, id by queue score) of the job's model
                and priority that its workers claim from, in this partition:
                its pool's and the any-pool one (k = 2), or the any-pool one
    KEYS[k+1..] the same queues at each higher priority, in this partition
    ARGV[1]     the ZCOUNT max bound: "(<score>" (this partition's job of an
                equal score comes after the job's) or "<score>" (before it)
    ARGV[2]     k

  Output:
    n: every job in KEYS[k+1..], plus those of KEYS[1..k] scored below the bound.
    Exact whatever order the queue's ids are in (scores, not ids, order it).

  Transitions: none (read only). Cost: O(log N) + O(priorities): one ZCOUNT
  and a ZCARD per higher priority, no loop over the queue.
]]

local same = tonumber(ARGV[2])
local ahead = 0
for i = 1, same do
  ahead = ahead + redis.call('ZCOUNT', KEYS[i], '-inf', ARGV[1])
end
for i = same + 1, #KEYS do
  ahead = ahead + redis.call('ZCARD', KEYS[i])
end
return ahead
