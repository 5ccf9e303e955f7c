--[[
  The worker daemon's fast path: end several attempts, then claim the next
  jobs, in one call (WorkerService.ReportAndClaim).

  Input:
    KEYS[1..10]   the transition keys (see includes/common.lua)
    KEYS[11..]    per result: its job hash, then its result string (2 keys each)
    KEYS[..]      the ready queues of the models, priority-major, as claim.lua
                  (3 x n_models keys)
    KEYS[last-1]  this call's operation key for the results: their codes are
                  recorded under it as JSON, so a resend answers them alike
    KEYS[last]    this call's operation key for the claim (includes/once.lua):
                  its leases are recorded as claim.lua records them, so
                  release.lua can give them back when the caller is gone
    ARGV[1..3]    prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4]       worker_id
    ARGV[5]       lease_timeout_ms
    ARGV[6]       max_jobs (0: claim nothing)
    ARGV[7]       n_models
    ARGV[8]       n_results
    ARGV[9]       retry backoff base ms
    ARGV[10]      retry backoff cap ms
    ARGV[11..]    per result, 8 values: job id, lease id, status, result bytes,
                  result content type, error_code, error_message, retryable (0|1)
    ARGV[..]      one fresh lease id per job that may be claimed (max_jobs)

  Keys built from the prefix: as set_result.lua and claim.lua.

  Output:
    {{{code, snapshot or false}, ...}, {claimed entry, ...}}: per result, in
    order, code 1 applied, 0 a repeat of the same lease and outcome (nothing
    changed), or a negative code (RC.JOB_NOT_FOUND, RC.LEASE_LOST,
    RC.JOB_CANCELLED: nothing changed) with no snapshot; then the claimed
    jobs as claim.lua answers them.

  Transitions: each result as set_result.lua, then each claim as claim.lua,
  all in this one atomic step.
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"
--- @include "common"
--- @include "once"
--- @include "end_attempt"
--- @include "claim_jobs"

local n_results = tonumber(ARGV[8])
local n_models = tonumber(ARGV[7])
local K_RESULTS_OP = KEYS[#KEYS - 1]

local function answers_for(codes)
  local answers = {}
  for i, code in ipairs(codes) do
    local id = ARGV[11 + (i - 1) * 8]
    answers[i] = {code, code >= 0 and snapshot(PREFIX, id) or false}
  end
  return answers
end

local codes
local recorded_codes = redis.call('GET', K_RESULTS_OP)
if recorded_codes then
  codes = cjson.decode(recorded_codes)
else
  codes = {}
  local changed = false
  for i = 1, n_results do
    local a = 11 + (i - 1) * 8
    codes[i] = end_attempt(KEYS[9 + 2 * i], KEYS[10 + 2 * i], ARGV[a], ARGV[a + 1],
      ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7] == '1',
      tonumber(ARGV[9]), tonumber(ARGV[10]))
    changed = changed or codes[i] == 1
  end
  if changed then
    redis.call('SET', K_RESULTS_OP, cjson.encode(codes), 'PX', OP_TTL_MS)
  end
end

local claimed = {}
local recorded = op_recorded()
if recorded then
  claimed = replay_leases(recorded)
elseif tonumber(ARGV[6]) > 0 then
  local leases
  claimed, leases = claim_jobs(11 + 2 * n_results, n_models, tonumber(ARGV[6]), ARGV[4],
    tonumber(ARGV[5]), 11 + 8 * n_results)
  if #leases > 0 then
    op_record(cjson.encode(leases))
  end
end
return {answers_for(codes), claimed}
