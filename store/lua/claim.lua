--[[
  Claim up to max_jobs claimable jobs for a worker serving some models.

  Input:
    KEYS[1..10]   the transition keys (see includes/common.lua)
    KEYS[11..]    the declared job and model groups (includes/declared.lua):
                  every model claimed from, the head ids the caller expects
                  (hints) and their parents
    KEYS[last]    this call's operation key (includes/once.lua): the leases
                  are recorded under it as JSON [[id, lease_id, deadline], ...]
    ARGV[1..4]    the transition arguments (includes/common.lua)
    ARGV[5]       worker_id
    ARGV[6]       lease_timeout_ms
    ARGV[7]       max_jobs
    ARGV[8]       peek: when it stops at an undeclared head, it asks for at
                  least this many ids of every queue
    ARGV[9]       n_models
    ARGV[10..]    the models (n_models), then one fresh lease id per job that
                  may be claimed (max_jobs)
    ARGV[..]      the declaration tail (includes/declared.lua)

  Output:
    {{{record (flat), payload, lease_id, lease_deadline_ms, held}, ...},
     needed, hints}: the claimed jobs in claim order (empty when nothing is
    claimable; `held`, for a child of a group with max_parallel, the first
    held siblings: a hint for its end, absent in a resend's answer); `needed` the job ids it stopped for (empty unless a queue
    head or its parent was not declared: the caller claims the remainder
    with them declared); `hints` the ids now at the heads of the models'
    queues. A resend of a call that claimed answers the same leases (those
    still held; none after release.lua). An id whose record is gone
    (orphan) is dropped from the indexes and skipped, never recreated.

  Transitions: QUEUED -> PROCESSING (attempts+1, worker_id, lease); a group
  parent QUEUED -> PROCESSING when its first child starts. Events: one per
  transition. Publishes "j <id>" and "q <model>". Cost: O(models x log N)
  per claimed job.
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "common"
--- @include "once"
--- @include "claim_jobs"

local n_models = tonumber(ARGV[9])
local models = {}
for i = 1, n_models do
  models[i] = ARGV[9 + i]
end
local recorded = op_recorded()
if recorded then
  return {replay_leases(recorded), {}, {}}
end
local claimed, leases, needed = claim_jobs(models, tonumber(ARGV[7]), ARGV[5],
  tonumber(ARGV[6]), 10 + n_models, tonumber(ARGV[8]))
if #leases > 0 then
  op_record(cjson.encode(leases))
end
return {claimed, needed, head_hints(models, tonumber(ARGV[7]))}
