--[[
  Create a single job, or a group with its children; or return the keyed original.

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11]     idempotency key (string "<fingerprint> <job id>"), only when
                 ARGV[11] is 1
    KEYS[..]     the declared job and model groups (includes/declared.lua):
                 every job id of the request and every model; the job an
                 idempotency key names, once asked for
    KEYS[last]   this call's operation key (unused: the new job's id, drawn by the
                 caller per call, tells a resend: the job exists)
    ARGV[1..4]   the transition arguments (includes/common.lua)
    ARGV[5]      tenant
    ARGV[6]      request fingerprint
    ARGV[7]      max_live_per_tenant
    ARGV[8]      max_live_total
    ARGV[9]      max_group_children
    ARGV[10]      JSON spec: {kind, id, priority, idempotency_key, max_parallel,
                 model, jobs: [{id, model, fields (the copied JobSpec fields), max_attempts,
                 queue_timeout, run_timeout, idempotency_key}]}
    ARGV[11]     1 if KEYS[11] is the idempotency key, else 0
    ARGV[12..]   one payload per spec.jobs entry, in order
    ARGV[..]     the declaration tail (includes/declared.lua)

  The checks and writes are includes/submit.lua's, which submit_batch.lua
  shares.

  Output:
    {1, reused (0|1), snapshot}
    a resend of a call that created a job: {1, 0, snapshot} of that job
    {-4}  IDEMPOTENCY_KEY_REUSED: same tenant + key, another fingerprint
    {-5}  QUOTA_EXCEEDED: the tenant's live jobs would pass the cap
    {-6}  QUEUE_FULL: live jobs in total would pass the cap
    {-7}  INVALID_CHILDREN: a group with no children or more than the cap
    {-8, ids, models, keys}  KEYS_NEEDED: the job the idempotency key names
          (and its snapshot's keys): declare them and call again (nothing
          changed)
    OOM error (redis): the first write (SET seq) is refused before any change

  Transitions: none -> QUEUED (single, group parent); none -> HELD -> QUEUED
  (children, up to max_parallel). Events: one per transition. Publishes
  "r <model> <id>" and "j <id>".
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "common"
--- @include "plan"
--- @include "once"
--- @include "submit"

local item = {
  tenant = ARGV[5],
  fingerprint = ARGV[6],
  idem = ARGV[11] == '1' and KEYS[11] or nil,
  spec = cjson.decode(ARGV[10]),
  payload_at = 12,
}
-- A resend of this call after a lost reply: the job it made exists (its id
-- is this call's own, drawn by the caller), so it answers as the first run.
local root_id = item.spec['id']
if redis.call('EXISTS', jk(root_id)) == 1 then
  return {1, 0, snapshot(root_id)}
end

local caps = {per_tenant = tonumber(ARGV[7]), total = tonumber(ARGV[8]),
  children = tonumber(ARGV[9])}

local verdict = submit_check(item, caps, submit_pending(), 0)
local needed = keys_needed()
if needed then
  return needed
end
if verdict then
  if verdict[1] == REUSE_JOB then
    return {1, 1, snapshot(verdict[2])}
  end
  return verdict
end

local root = submit_create(item)
return {1, 0, snapshot(root)}
