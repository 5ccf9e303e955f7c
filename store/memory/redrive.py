"""RetryJob in memory (retry_job.lua's twin): a FAILED or CANCELLED job back to work.

A single job goes back to QUEUED at the back of its queue (`State.enqueue`,
as a new submit), with attempts 0, its error, end time, worker and lease
cleared (a late report of the old attempt is LEASE_LOST) and no expiry. A
FAILED, PARTIAL or CANCELLED group's children that ended without completing
go back to HELD and are released under max_parallel again; completed
children keep their results, children still running (a cancelled group's)
run on and count as active; the parent is QUEUED (PROCESSING while a child
runs) with its error and end cleared. The tenant's live caps apply to the
jobs that become live again.
"""

from __future__ import annotations

from store.errors import JobNotRetryable, QueueFull, QuotaExceeded
from store.memory.record import Record
from store.memory.state import State
from store.model import LIVE_STATUSES, JobKind, JobStatus
from store.redrive import RETRYABLE, WHY


def _refused(record: Record, why: str) -> JobNotRetryable:
    return JobNotRetryable(f"job {record.id!r} cannot be retried: {WHY[why]}", job_id=record.id)


def retry(state: State, record: Record, now: float) -> None:
    """Put `record` (a visible job) back to work, or raise JobNotRetryable / a cap's error."""
    if record.kind is JobKind.CHILD:
        raise _refused(record, "alone")
    if record.status not in RETRYABLE[record.kind]:
        raise _refused(record, "status")
    if record.kind is JobKind.GROUP:
        _retry_group(state, record, now)
        return
    _admit(state, record.tenant, 1)
    _revive(state, record, 1)
    state.transition(record, JobStatus.QUEUED, now)
    state.enqueue(record, now)


def _retry_group(state: State, parent: Record, now: float) -> None:
    children = [state.jobs[child_id] for child_id in parent.children if child_id in state.jobs]
    redo = [c for c in children if c.status in (JobStatus.FAILED, JobStatus.CANCELLED)]
    running = [c for c in children if c.status in LIVE_STATUSES]
    if not redo and not running:
        raise _refused(parent, "done")
    _admit(state, parent.tenant, len(redo))
    completed = sum(c.status is JobStatus.COMPLETED for c in children)
    _revive(state, parent, 0)
    for child in children:
        if child.expire_at is not None:
            child.expire_at = None
            state.changes.touched(child)  # a kept COMPLETED child gets no event of its own
    parent.ended_children = parent.completed_children = completed
    parent.active_children = len(running)
    parent.progress = completed / len(parent.children)
    state.transition(parent, JobStatus.PROCESSING if running else JobStatus.QUEUED, now)
    for child in redo:
        _revive(state, child, 1)
        state.transition(child, JobStatus.HELD, now)
    parent.next_held = 0  # release_held skips the children that are not HELD
    state.release_held(parent, now)


def _admit(state: State, tenant: str, count: int) -> None:
    settings = state.settings
    if state.live_by_tenant.get(tenant, 0) + count > settings.max_live_per_tenant:
        raise QuotaExceeded(f"tenant {tenant!r} has too many live jobs", tenant=tenant)
    if state.live_total + count > settings.max_live_total:
        raise QueueFull("too many live jobs")


def _revive(state: State, record: Record, live: int) -> None:
    """The attempt's traces cleared, no expiry; `live` jobs counted live again."""
    record.attempts = 0
    record.error_code = record.error_message = ""
    record.end_time = None
    record.worker_id = record.lease_id = ""
    record.outcome = None
    record.cancel_requested = False
    record.progress, record.stage = 0.0, ""
    record.ready_at = 0.0
    record.expire_at = None
    if live:
        state.live_by_tenant[record.tenant] = state.live_by_tenant.get(record.tenant, 0) + live
        state.live_total += live
