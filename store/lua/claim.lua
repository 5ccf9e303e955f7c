--[[
  Claim up to max_jobs claimable jobs for a worker serving some models.

  Input:
    KEYS[1..10]   the transition keys (see includes/common.lua)
    KEYS[11..]    the ready queues (zset, id by submit sequence) of the
                  models, priority-major: n_models keys for INTERACTIVE, then
                  SYSTEM, then BATCH
    KEYS[last]    this call's operation key (includes/once.lua): the leases
                  are recorded under it as JSON [[id, lease_id, deadline], ...]
    ARGV[1..3]    prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4]       worker_id
    ARGV[5]       lease_timeout_ms
    ARGV[6]       max_jobs
    ARGV[7]       n_models
    ARGV[8..]     one fresh lease id per job that may be claimed (max_jobs)

  Keys built from the prefix: the claimed jobs' hashes and payloads, a
  child's parent hash.

  Output:
    {{record (flat), payload, lease_id, lease_deadline_ms}, ...} in claim
    order; empty when nothing is claimable. A resend of a call that claimed
    answers the same leases (those still held; none after release.lua). An
    id whose record is gone
    (orphan) is dropped from the indexes and skipped, never recreated.

  Transitions: QUEUED -> PROCESSING (attempts+1, worker_id, lease); a group
  parent QUEUED -> PROCESSING when its first child starts. Events: one per
  transition. Publishes "j <id>" and "q <model>". Cost: O(models x log N)
  per claimed job.
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"
--- @include "common"
--- @include "once"
--- @include "claim_jobs"

local recorded = op_recorded()
if recorded then
  return replay_leases(recorded)
end
local claimed, leases = claim_jobs(11, tonumber(ARGV[7]), tonumber(ARGV[6]), ARGV[4],
  tonumber(ARGV[5]), 8)
if #leases > 0 then
  op_record(cjson.encode(leases))
end
return claimed
