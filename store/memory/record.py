"""One job's stored, mutable state in memory (LocalEngine's), never handed out."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from store.model import JobKind, JobStatus, Priority, ResultReport

#: What a set_result asked for, to recognise a repeat after a lost answer: status,
#: retryable, error code and the result's digest (as the Redis store keeps its
#: sha1): the result itself would be kept twice, and encoded into every write of
#: the record's row by the durable store.
Outcome = tuple[JobStatus, bool, str, bytes]


def outcome_of(report: ResultReport) -> Outcome:
    digest = hashlib.sha1(report.result, usedforsecurity=False).digest()
    return (report.status, report.retryable, report.error_code, digest)


def same_outcome(recorded: Outcome | None, outcome: Outcome, result: bytes) -> bool:
    """Whether `outcome` (of a report of `result`) is the one recorded. A record
    written before outcomes kept a digest holds the result itself."""
    if recorded is None or recorded[:3] != outcome[:3]:
        return False
    return recorded[3] == outcome[3] or recorded[3] == result


@dataclass(slots=True)
class Record:
    """The stored, mutable state of one job; never handed out.

    Its first fields are the Job's stored ones under the same names (the
    field table, store/fields.py: times as epoch seconds, durations as
    seconds), so a snapshot is made from the table; the rest is bookkeeping.
    """

    id: str
    tenant: str
    kind: JobKind
    status: JobStatus
    priority: Priority
    model: str
    create_time: float
    update_time: float
    fingerprint: str = ""
    payload: bytes = b""
    content_type: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    idempotency_key: str = ""
    attempts: int = 0
    max_attempts: int = 0
    queue_timeout: float = 0.0
    run_timeout: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    progress: float = 0.0
    stage: str = ""
    result: bytes = b""
    result_content_type: str = ""
    error_code: str = ""
    error_message: str = ""
    parent_id: str = ""
    child_index: int = 0
    max_parallel: int = 0
    worker_id: str = ""
    cancel_requested: bool = False
    pool: str = ""
    # Bookkeeping below is not part of the Job snapshot.
    seq: float = 0.0  # queue score: FIFO counter, or the fair-share pass
    weight: int = 0  # the tenant's fair-share weight at submit (0: fair share off)
    lease_id: str = ""  # the latest attempt's lease, kept after it ends
    lease_deadline: float = 0.0
    run_deadline: float = 0.0
    outcome: Outcome | None = None  # what set_result recorded under lease_id
    queue_deadline: float = 0.0
    ready_at: float = 0.0  # end of a retry backoff (0 = not backing off)
    expire_at: float | None = None
    children: list[str] = field(default_factory=list)  # groups: ids in index order
    next_held: int = 0  # groups: index of the next child to release
    active_children: int = 0  # groups: children QUEUED or PROCESSING
    ended_children: int = 0
    completed_children: int = 0
