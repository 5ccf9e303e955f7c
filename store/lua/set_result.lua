--[[
  End an attempt: COMPLETED, FAILED, or FAILED+retryable (requeue after backoff).

  Input:
    KEYS[1..10]  the transition keys (see includes/common.lua)
    KEYS[11]     the job hash
    KEYS[12]     the job's result (string)
    KEYS[13]     this call's operation key (includes/once.lua)
    ARGV[1..3]   prefix, events_max_length, result_ttl_ms (common.lua)
    ARGV[4]      job id
    ARGV[5]      lease id (fencing token)
    ARGV[6]      status: "completed" | "failed"
    ARGV[7]      result bytes
    ARGV[8]      result content type
    ARGV[9]      error_code
    ARGV[10]     error_message
    ARGV[11]     retryable (0|1)
    ARGV[12]     retry backoff base ms
    ARGV[13]     retry backoff cap ms

  Keys built from the prefix: a child's parent and siblings (group steps).

  Output:
    {1, snapshot, 1}  applied (also the answer to a resend of that call)
    {1, snapshot, 0}  the same lease + outcome (status, retryable, error_code,
                      result digest) seen before: the stored job, unchanged
    {-1}  JOB_NOT_FOUND: no record (expired, or never existed)
    {-2}  LEASE_LOST: not the job's latest lease, or another outcome for an
          ended lease (changes nothing)
    {-3}  JOB_CANCELLED: cancelled while this lease held it

  Transitions: PROCESSING -> COMPLETED | FAILED; PROCESSING -> QUEUED (retry,
  claimable after base * 2^(attempts-1), capped), or FAILED with
  ATTEMPTS_EXHAUSTED past max_attempts, or CANCELLED instead of a retry when
  the job is a child of a cancelled group; a child's end may release
  the next HELD child (HELD -> QUEUED) and end its parent (-> COMPLETED |
  FAILED | PARTIAL). TTL: result_ttl on the terminal job's record, payload,
  result and idempotency key. Under OOM it still runs: oom_guard writes first.
]]
--- @include "keys"
--- @include "policy"
--- @include "snapshot"
--- @include "common"
--- @include "once"
--- @include "end_attempt"

local id = ARGV[4]
if op_recorded() then
  return {1, snapshot(PREFIX, id), 1}
end
local code = end_attempt(KEYS[11], KEYS[12], id, ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9],
  ARGV[10], ARGV[11] == '1', tonumber(ARGV[12]), tonumber(ARGV[13]))
if code < 0 then
  return {code}
end
if code == 1 then
  op_record('1')
end
return {1, snapshot(PREFIX, id), code}
