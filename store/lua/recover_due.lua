--[[
  Which of one partition's recovery indexes hold something due now, by the
  store's clock: recovery (store/redis/recovery.py) runs only those scripts.
  A step with nothing due (most steps, a few times a second) then costs one
  short read per partition instead of four transition scripts and a read.

  Input:
    KEYS[1..4]  run_deadlines, leases, retries, queue_timeouts (zsets, id by
                due time in ms)
    KEYS[5]     index:expiring (list, "<due ms> <member> <model>" in the order
                pushed: its head is due first)

  Output:
    {d1, d2, d3, d4, d5}: 1 where the earliest entry is due (its time <= now
    in ms, as includes/common.lua's NOW), else 0.

  Transitions: none (read only). Cost: O(1) per key: ZRANGE 0 0 and LINDEX 0.
]]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = {}
for i = 1, 4 do
  local first = redis.call('ZRANGE', KEYS[i], '0', '0', 'WITHSCORES')
  due[i] = (first[2] and tonumber(first[2]) <= now) and 1 or 0
end
local head = redis.call('LINDEX', KEYS[5], '0')
local head_due = head and tonumber(string.match(head, '^(%d+)'))
due[5] = (head_due and head_due <= now) and 1 or 0
return due
