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

local key = KEYS[11]
local id = ARGV[4]
local lease_id = ARGV[5]
local status = ARGV[6]
local retryable = ARGV[11] == '1'
if op_recorded() then
  return {1, snapshot(PREFIX, id), 1}
end
-- what was asked, to recognise a repeat after a lost answer
local outcome = table.concat({status, ARGV[11], ARGV[9], redis.sha1hex(ARGV[7])}, '|')

local f = redis.call('HMGET', key, 'status', 'lease_id', 'outcome', 'attempts',
  'cancel_requested')
if not f[1] then
  return {RC.JOB_NOT_FOUND}
end
if f[2] ~= lease_id then
  return {RC.LEASE_LOST}
end
if f[1] == ST.CANCELLED and f[5] == '1' then
  return {RC.JOB_CANCELLED}
end
if f[1] ~= ST.PROCESSING then
  if f[3] == outcome then
    return {1, snapshot(PREFIX, id), 0}
  end
  return {RC.LEASE_LOST}
end

oom_guard(key)
redis.call('HSET', key, 'outcome', outcome)
if status == ST.COMPLETED then
  if ARGV[7] ~= '' then
    redis.call('SET', KEYS[12], ARGV[7])
  end
  redis.call('HSET', key, 'result_content_type', ARGV[8], 'progress', '1')
  finish(id, ST.COMPLETED, '', '')
elseif retryable then
  retry_or_exhaust(id, ARGV[9], ARGV[10],
    backoff_ms(tonumber(f[4]), tonumber(ARGV[12]), tonumber(ARGV[13])))
else
  finish(id, ST.FAILED, ARGV[9], ARGV[10])
end
op_record('1')
return {1, snapshot(PREFIX, id), 1}
