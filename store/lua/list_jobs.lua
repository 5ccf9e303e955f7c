--[[
  Read ListJobs' index runs merged, newest first, below a bound (read only).

  A run is the members of one sorted set that start with one prefix
  (index:status "<tenant>|<S><K>", or "" for an index:model set); after
  the prefix every member is "<create ms, 13 digits><job id>", its key in
  the walk's order (store/listing.py, includes/index.lua).

  Input:
    KEYS[1..]  the sorted sets the runs are in
    ARGV[1]    limit: at most this many keys are returned
    ARGV[2]    upper bound, exclusive: a key (or its leading digits); '' for none
    ARGV[3]    lower bound, inclusive: a key's leading digits; '' for none
    ARGV[4..]  the runs: KEYS index, prefix; KEYS index, prefix; ...

  Output:
    {keys, exhausted}  up to `limit` keys ("<ms><id>"), largest first, and 1
                       when nothing below the last one is left in any run

  Cost: O((runs + limit) x log N): one seek per run, then one read per
  batch a run gives; batches start small and double.

  Transitions: none (read only).
]]
local limit = tonumber(ARGV[1])
local upper, lower = ARGV[2], ARGV[3]
local runs = {}
for i = 4, #ARGV, 2 do
  runs[#runs + 1] = {key = KEYS[tonumber(ARGV[i])], lead = ARGV[i + 1], buffer = {},
    at = 1, done = false, last = nil, batch = 0}
end
local first_batch = math.max(2, math.ceil(limit / math.max(#runs, 1)) + 1)

-- The next batch of `run`, below what it gave last (or the upper bound).
local function fill(run)
  local top
  if run.last then
    top = '(' .. run.lead .. run.last
  elseif upper ~= '' then
    top = '(' .. run.lead .. upper
  else
    top = '[' .. run.lead .. '~'  -- above every key: keys are digits and letters
  end
  run.batch = run.batch == 0 and first_batch or math.min(run.batch * 2, limit + 1)
  local got = redis.call('ZREVRANGEBYLEX', run.key, top, '[' .. run.lead .. lower,
    'LIMIT', 0, run.batch)
  local cut = #run.lead + 1
  run.buffer, run.at = {}, 1
  for i, member in ipairs(got) do
    run.buffer[i] = string.sub(member, cut)
  end
  run.done = #got < run.batch
  if #got > 0 then
    run.last = run.buffer[#got]
  end
end

-- The run whose next key is the largest, refilling drained ones; nil when all are done.
local function best()
  local chosen, key = nil, nil
  for _, run in ipairs(runs) do
    if run.at > #run.buffer and not run.done then
      fill(run)
    end
    local head = run.buffer[run.at]
    if head and (not key or head > key) then
      chosen, key = run, head
    end
  end
  return chosen
end

local out = {}
while #out < limit do
  local run = best()
  if not run then
    return {out, 1}
  end
  out[#out + 1] = run.buffer[run.at]
  run.at = run.at + 1
end
return {out, best() and 0 or 1}
