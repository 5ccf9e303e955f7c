"""The negative codes the Lua scripts return, and the one place they become exceptions."""

from __future__ import annotations

from enum import IntEnum

from store import errors
from store.redrive import WHY


class LuaCode(IntEnum):
    """Every `return {-N}` of store/lua/*.lua (a closed set, as BullMQ's ErrorCode)."""

    JOB_NOT_FOUND = -1
    LEASE_LOST = -2
    JOB_CANCELLED = -3
    IDEMPOTENCY_KEY_REUSED = -4
    QUOTA_EXCEEDED = -5
    QUEUE_FULL = -6
    INVALID_CHILDREN = -7
    # Not an error: the script met job ids or models whose keys were not in
    # KEYS and changed nothing; the caller declares them and calls again
    # (store/lua/includes/declared.lua).
    KEYS_NEEDED = -8
    # RetryJob: the job's status or kind may not be retried (the reply's
    # second item says why).
    JOB_NOT_RETRYABLE = -9


def error_for(
    code: int, job_id: str = "", max_group_children: int = 0, why: str = ""
) -> errors.StoreError:
    """The store exception for a script's negative code (ValueError for an
    unknown code, and for KEYS_NEEDED, which asks the caller for keys)."""
    lua_code = LuaCode(code)
    if lua_code is LuaCode.KEYS_NEEDED:
        raise ValueError("KEYS_NEEDED is a request for keys, not an error")
    ids = {"job_id": job_id} if job_id else {}
    if lua_code is LuaCode.JOB_NOT_FOUND:
        return errors.JobNotFound(f"job {job_id!r} not found", **ids)
    if lua_code is LuaCode.LEASE_LOST:
        return errors.LeaseLost(f"lease of job {job_id!r} is not live", **ids)
    if lua_code is LuaCode.JOB_CANCELLED:
        return errors.JobCancelled(f"job {job_id!r} was cancelled", **ids)
    if lua_code is LuaCode.IDEMPOTENCY_KEY_REUSED:
        return errors.IdempotencyKeyReused(
            "idempotency key was used for a different request", **ids
        )
    if lua_code is LuaCode.QUOTA_EXCEEDED:
        return errors.QuotaExceeded("too many live jobs for this tenant")
    if lua_code is LuaCode.QUEUE_FULL:
        return errors.QueueFull("too many live jobs")
    if lua_code is LuaCode.JOB_NOT_RETRYABLE:
        return errors.JobNotRetryable(
            f"job {job_id!r} cannot be retried: {WHY.get(why, why)}", **ids
        )
    return errors.InvalidRequest(
        "group.children", f"a group needs between 1 and {max_group_children} children"
    )
