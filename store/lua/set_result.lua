#!lua flags=allow-oom
--[[
  End an attempt: COMPLETED, FAILED, or FAILED+retryable (requeue after backoff).

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11..]   the declared job and model groups and raw keys
                 (includes/declared.lua): the job, and what the plan asks
                 for (its model, idempotency key, a child's parent and
                 siblings)
    KEYS[last]   this call's operation key (includes/once.lua); only its name is
                 used: the ended record keeps it ('op'), so a resend of this
                 call answers as the first run did without a key of its own
    ARGV[1..4]   the transition arguments (includes/common.lua)
    ARGV[5]      job id
    ARGV[6]      lease id (fencing token)
    ARGV[7]      status: "completed" | "failed"
    ARGV[8]      result bytes
    ARGV[9]      result content type
    ARGV[10]      error_code
    ARGV[11]     error_message
    ARGV[12]     retryable (0|1)
    ARGV[13]     retry backoff base ms
    ARGV[14]     retry backoff cap ms
    ARGV[..]     the declaration tail (includes/declared.lua)

  Output:
    {1, snapshot, 1}  applied (also the answer to a resend of that call)
    {1, snapshot, 0}  the same lease + outcome (status, retryable, error_code,
                      result digest) seen before: the stored job, unchanged
    {-1}  JOB_NOT_FOUND: no record (expired, or never existed)
    {-2}  LEASE_LOST: not the job's latest lease, or another outcome for an
          ended lease (changes nothing)
    {-3}  JOB_CANCELLED: cancelled while this lease held it
    {-8, ids, models, keys}  KEYS_NEEDED: declare these and call again
          (nothing changed)

  Transitions: PROCESSING -> COMPLETED | FAILED; PROCESSING -> QUEUED (retry,
  claimable after base * 2^(attempts-1), capped), or FAILED with
  ATTEMPTS_EXHAUSTED past max_attempts, or CANCELLED instead of a retry when
  the job is a child of a cancelled group; a child's end may release
  the next HELD child (HELD -> QUEUED) and end its parent (-> COMPLETED |
  FAILED | PARTIAL). TTL: result_ttl on the terminal job's record, payload,
  result and idempotency key. Under OOM it still runs: its shebang says allow-oom.
]]
--- @include "policy"
--- @include "declared"
--- @include "snapshot"
--- @include "common"
--- @include "plan"
--- @include "once"
--- @include "end_attempt"

local id = ARGV[5]
local outcome = attempt_outcome(ARGV[7], ARGV[12] == '1', ARGV[10], ARGV[8])
local code, j = end_attempt_check(id, ARGV[6], outcome, K_OP)
if code and code < 0 then
  return {code}
end
local needed = finish_plan()
if needed then
  return needed
end
-- The stored result is this call's (applied now, resent, or the same
-- outcome again: its digest matched), so the snapshot need not read it.
if code then  -- 0: the same outcome again; 1: this call's own, resent
  return {1, snapshot(id, ARGV[8]), code}
end
end_attempt(id, j, K_OP, outcome, ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11],
  ARGV[12] == '1', tonumber(ARGV[13]), tonumber(ARGV[14]))
return {1, snapshot(id, ARGV[8]), 1}
