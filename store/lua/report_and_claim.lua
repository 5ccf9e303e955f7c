#!lua flags=allow-oom
--[[
  The worker daemon's fast path: end several attempts, then claim the next
  jobs, in one call (WorkerService.ReportAndClaim).

  Input:
    KEYS[1..10]   the transition keys (see includes/common.lua)
    KEYS[11..]    the declared job and model groups and raw keys
                  (includes/declared.lua): every reported job, the claimed
                  models, and what the plans ask for
    KEYS[last-1]  this call's operation key for the results: only its name
                  is used, kept in each ended record ('op'), so a resend
                  answers the results this call applied as applied
    KEYS[last]    this call's operation key for the claim (includes/once.lua):
                  its leases are recorded as claim.lua records them, so
                  release.lua can give them back when the caller is gone
    ARGV[1..4]    the transition arguments (includes/common.lua)
    ARGV[5]       worker_id
    ARGV[6]       lease_timeout_ms
    ARGV[7]       max_jobs (0: claim nothing)
    ARGV[8]       n_models
    ARGV[9]       n_results
    ARGV[10]      retry backoff base ms
    ARGV[11]      retry backoff cap ms
    ARGV[12..]    per result, 8 values: job id, lease id, status, result bytes,
                  result content type, error_code, error_message, retryable (0|1)
    ARGV[..]      the models (n_models), then one fresh lease id per job that
                  may be claimed (max_jobs)
    ARGV[..]      the declaration tail (includes/declared.lua)

  Output:
    {{{code, snapshot or false}, ...}, {claimed entry, ...}, needed, hints}:
    per result, in order, code 1 applied, 0 a repeat of the same lease and
    outcome (nothing changed), or a negative code (RC.JOB_NOT_FOUND,
    RC.LEASE_LOST, RC.JOB_CANCELLED: nothing changed) with no snapshot;
    then the claimed jobs, the ids the claim stopped for and the head hints,
    as claim.lua answers them.
    {-8, ids, models, keys}  KEYS_NEEDED for the results: declare these and
    call again (nothing changed, nothing claimed)

  Transitions: each result as set_result.lua, then each claim as claim.lua,
  all in this one atomic step.
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "common"
--- @include "plan"
--- @include "once"
--- @include "end_attempt"
--- @include "claim_jobs"

local n_results = tonumber(ARGV[9])
local n_models = tonumber(ARGV[8])
local models_at = 12 + 8 * n_results
local models = {}
for i = 1, n_models do
  models[i] = ARGV[models_at - 1 + i]
end
local K_RESULTS_OP = KEYS[#KEYS - 1]

local function answers_for(codes)
  local answers = {}
  for i, code in ipairs(codes) do
    local a = 12 + (i - 1) * 8
    -- the stored result is this report's (set_result.lua says why)
    answers[i] = {code, code >= 0 and snapshot(ARGV[a], ARGV[a + 3]) or false}
  end
  return answers
end

-- plan every result first: nothing is written unless all keys are declared.
-- A result this call applied already (a resend after a lost reply) is
-- answered 1: its record keeps this call's results op id.
local codes = {}
local outcomes = {}
local fields = {}
for i = 1, n_results do
  local a = 12 + (i - 1) * 8
  outcomes[i] = attempt_outcome(ARGV[a + 2], ARGV[a + 7] == '1', ARGV[a + 5], ARGV[a + 3])
  local code, j = end_attempt_check(ARGV[a], ARGV[a + 1], outcomes[i], K_RESULTS_OP)
  codes[i], fields[i] = code or 2, j
end
local needed_keys = finish_plan()
if needed_keys then
  return needed_keys
end
local ended = {}
for i = 1, n_results do
  local a = 12 + (i - 1) * 8
  if codes[i] == 2 and ended[ARGV[a]] then
    -- the same job twice: checked again after the first one's end, as it
    -- would be in a call of its own (a repeat, or LEASE_LOST)
    local code, j = end_attempt_check(ARGV[a], ARGV[a + 1], outcomes[i], nil)
    codes[i], fields[i] = code or 2, j
  end
  if codes[i] == 2 then
    ended[ARGV[a]] = true
    end_attempt(ARGV[a], fields[i], K_RESULTS_OP, outcomes[i], ARGV[a + 2], ARGV[a + 3],
      ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7] == '1', tonumber(ARGV[10]),
      tonumber(ARGV[11]))
    codes[i] = 1
  end
end

local claimed, needed, hints = {}, {}, {}
local recorded = op_recorded()
if recorded then
  claimed = replay_leases(recorded)
elseif tonumber(ARGV[7]) > 0 then
  local leases
  claimed, leases, needed = claim_jobs(models, tonumber(ARGV[7]), ARGV[5],
    tonumber(ARGV[6]), models_at + n_models, HINT_HEADS)
  if #leases > 0 then
    op_record(cjson.encode(leases))
  end
  hints = head_hints(models, tonumber(ARGV[7]))
end
return {answers_for(codes), claimed, needed, hints}
