--[[
  BatchSubmit: many submits in one atomic step, all or nothing.

  Input:
    KEYS[1..10]   the transition keys (see includes/common.lua)
    KEYS[11..]    the idempotency key (string "<fingerprint> <job id>") of
                  each keyed item, in item order; an item names its own
                  (its "key" field below)
    KEYS[..]      the declared job and model groups (includes/declared.lua):
                  every job id of every item and every model; the jobs
                  idempotency keys name, once asked for
    KEYS[last]    this call's operation key (includes/once.lua)
    ARGV[1..4]    the transition arguments (includes/common.lua)
    ARGV[5]       max_live_per_tenant
    ARGV[6]       max_live_total
    ARGV[7]       max_group_children
    ARGV[8]       N, the number of items
    ARGV[9..8+N]  one JSON item each: submit.lua's spec (ARGV[10] there) plus
                  tenant, fingerprint ("" when unkeyed) and key (the KEYS
                  index of its idempotency key, 0 when unkeyed)
    ARGV[9+N..]   the payloads: item 1's (one per spec.jobs entry, in
                  order), then item 2's, ...
    ARGV[..]      the declaration tail (includes/declared.lua)

  Every item is checked first, in order, as submit.lua checks one (an item
  may reuse the job an earlier item of the batch creates; admission counts
  the earlier items' jobs); only if none is refused is anything written.

  Output:
    {1, {reused (0|1), ...}, {snapshot, ...}}  one entry per item, in order
    a resend of a call that created jobs: the first run's answer, from the
    current records
    {-4, i}  IDEMPOTENCY_KEY_REUSED: item i (0-based) reuses a key (held, or
             taken by an earlier item) with another fingerprint
    {-5, i}  QUOTA_EXCEEDED: item i would pass the tenant's live cap
    {-6, i}  QUEUE_FULL: item i would pass the total live cap
    {-7, i}  INVALID_CHILDREN: item i is a group with no children or too many
    {-8, ids, models, keys}  KEYS_NEEDED: jobs idempotency keys name (and
             their snapshots' keys): declare them and call again (nothing
             changed)
    OOM error (redis): the first write (SET seq) is refused before any change

  Transitions: as submit.lua, for each created item: none -> QUEUED (single,
  group parent); none -> HELD -> QUEUED (children, up to max_parallel).
  Events: one per transition. Publishes "r <model> <id>" and "j <id>".
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "common"
--- @include "plan"
--- @include "once"
--- @include "submit"

-- The answer from each item's job id and reused flag, read after every write.
local function reply(ids, reused)
  local snapshots = {}
  for i = 1, #ids do
    snapshots[i] = snapshot(ids[i])
  end
  return {1, reused, snapshots}
end

local recorded = op_recorded()
if recorded then
  local ids, reused = {}, {}
  for flag, id in string.gmatch(recorded, '(%d):(%S+)') do
    ids[#ids + 1] = id
    reused[#reused + 1] = tonumber(flag)
  end
  return reply(ids, reused)
end

local caps = {per_tenant = tonumber(ARGV[5]), total = tonumber(ARGV[6]),
  children = tonumber(ARGV[7])}
local count = tonumber(ARGV[8])

-- Check every item before writing anything.
local items, verdicts = {}, {}
local pending = submit_pending()
local payload_at = 9 + count
for i = 1, count do
  local spec = cjson.decode(ARGV[8 + i])
  local key = tonumber(spec['key']) or 0
  local item = {
    tenant = spec['tenant'],
    fingerprint = spec['fingerprint'],
    idem = key > 0 and KEYS[key] or nil,
    spec = spec,
    payload_at = payload_at,
  }
  payload_at = payload_at + #spec['jobs']
  local verdict = submit_check(item, caps, pending, i)
  if verdict and verdict[1] == NEED_KEYS then
    -- later items' verdicts depend on this one: ask for what the later
    -- items' idempotency keys name too, then stop
    for j = i + 1, count do
      local later = cjson.decode(ARGV[8 + j])
      local later_key = tonumber(later['key']) or 0
      local held = later_key > 0 and redis.call('GET', KEYS[later_key])
      local held_id = held and string.match(held, '^%S+ (%S+)$')
      if held_id then
        need_job(held_id)
      end
    end
    return keys_needed()
  end
  if verdict and type(verdict[1]) == 'number' then
    return {verdict[1], i - 1}
  end
  items[i], verdicts[i] = item, verdict
end
local needed = keys_needed()
if needed then
  return needed
end

-- Then write, in order.
local ids, reused, parts = {}, {}, {}
local created = false
for i = 1, count do
  local verdict = verdicts[i]
  if verdict == nil then
    ids[i], reused[i] = submit_create(items[i]), 0
    created = true
  elseif verdict[1] == REUSE_JOB then
    ids[i], reused[i] = verdict[2], 1
  else
    ids[i], reused[i] = ids[verdict[2]], 1
  end
  parts[i] = reused[i] .. ':' .. ids[i]
end
if created then
  op_record(table.concat(parts, ' '))
end
return reply(ids, reused)
