"""The store's data model: plain dataclasses, no grpc, no redis.

Statuses, priorities and kinds mirror the proto enums of the same names
(`jobgate.v1.JobStatus` and so on); each server's `convert.py` maps them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum


class JobStatus(StrEnum):
    HELD = "held"
    QUEUED = "queued"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PARTIAL = "partial"


TERMINAL_STATUSES = frozenset(
    {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.PARTIAL}
)
LIVE_STATUSES = frozenset({JobStatus.HELD, JobStatus.QUEUED, JobStatus.PROCESSING})

# The state machine as data. A group parent moves QUEUED -> PROCESSING ->
# terminal as its children do; a child may also start HELD.
TRANSITIONS: Mapping[JobStatus | None, frozenset[JobStatus]] = {
    None: frozenset({JobStatus.HELD, JobStatus.QUEUED}),
    JobStatus.HELD: frozenset({JobStatus.QUEUED, JobStatus.CANCELLED}),
    JobStatus.QUEUED: frozenset(
        {
            JobStatus.PROCESSING,
            JobStatus.CANCELLED,
            JobStatus.FAILED,
            JobStatus.PARTIAL,
            JobStatus.COMPLETED,
        }
    ),
    JobStatus.PROCESSING: frozenset(
        {
            JobStatus.QUEUED,
            JobStatus.COMPLETED,
            JobStatus.FAILED,
            JobStatus.CANCELLED,
            JobStatus.PARTIAL,
        }
    ),
    JobStatus.COMPLETED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
    JobStatus.PARTIAL: frozenset(),
}


class Priority(IntEnum):
    """Claim class; a lower value is claimed first."""

    INTERACTIVE = 1
    SYSTEM = 2
    BATCH = 3


PRIORITIES_IN_CLAIM_ORDER = (Priority.INTERACTIVE, Priority.SYSTEM, Priority.BATCH)


class JobKind(StrEnum):
    SINGLE = "single"
    GROUP = "group"
    CHILD = "child"


# error_code values the store itself writes.
ERROR_ATTEMPTS_EXHAUSTED = "ATTEMPTS_EXHAUSTED"
ERROR_QUEUE_TIMEOUT = "QUEUE_TIMEOUT"
ERROR_RUN_TIMEOUT = "RUN_TIMEOUT"
ERROR_LEASE_EXPIRED = "LEASE_EXPIRED"
ERROR_CANCELLED = "CANCELLED"
# (A FAILED report without an error_code is jobgate.v1.errors.HANDLER_ERROR.)


@dataclass(frozen=True)
class StoreSettings:
    """Server-wide defaults and caps (the `jobgate serve` flags)."""

    lease_timeout: timedelta = timedelta(seconds=30)
    max_attempts: int = 3
    run_timeout: timedelta = timedelta(seconds=3600)
    queue_timeout: timedelta = timedelta(seconds=1800)
    result_ttl: timedelta = timedelta(seconds=86400)
    max_group_children: int = 1000
    max_live_per_tenant: int = 10_000
    max_live_total: int = 100_000
    # A retryable failure waits base * 2**(attempts-1), at most retry_backoff_max.
    retry_backoff_base: timedelta = timedelta(seconds=1)
    retry_backoff_max: timedelta = timedelta(seconds=60)
    # The audit stream is capped (approximately) at this many entries.
    events_max_length: int = 100_000


@dataclass(frozen=True)
class JobSpec:
    """One unit of work. Zero/None limits mean the store's defaults."""

    model: str
    payload: bytes = b""
    content_type: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    max_attempts: int = 0
    queue_timeout: timedelta | None = None
    run_timeout: timedelta | None = None


@dataclass(frozen=True)
class GroupSpec:
    children: tuple[JobSpec, ...]
    max_parallel: int = 0


@dataclass(frozen=True)
class SubmitRequest:
    """What a tenant asks the store to create."""

    tenant: str
    work: JobSpec | GroupSpec
    priority: Priority = Priority.BATCH
    idempotency_key: str = ""

    def fingerprint(self) -> str:
        """A digest of everything but the tenant, to tell a retry from a key reuse."""
        return hashlib.sha256(
            json.dumps(_canonical(self), sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()


def _spec_canonical(spec: JobSpec) -> dict[str, object]:
    return {
        "model": spec.model,
        "payload": hashlib.sha256(spec.payload).hexdigest(),
        "content_type": spec.content_type,
        "labels": dict(sorted(spec.labels.items())),
        "max_attempts": spec.max_attempts,
        "queue_timeout": spec.queue_timeout.total_seconds() if spec.queue_timeout else 0,
        "run_timeout": spec.run_timeout.total_seconds() if spec.run_timeout else 0,
    }


def _canonical(request: SubmitRequest) -> dict[str, object]:
    work: dict[str, object]
    if isinstance(request.work, GroupSpec):
        work = {
            "group": [_spec_canonical(c) for c in request.work.children],
            "max_parallel": request.work.max_parallel,
        }
    else:
        work = {"job": _spec_canonical(request.work)}
    return {"priority": int(request.priority), "key": request.idempotency_key, "work": work}


@dataclass(frozen=True)
class ChildSummary:
    id: str
    child_index: int
    status: JobStatus
    error_code: str = ""


@dataclass(frozen=True)
class Job:
    """A snapshot of one job. Stores return fresh copies; mutating one changes nothing."""

    id: str
    tenant: str
    kind: JobKind
    status: JobStatus
    priority: Priority
    model: str
    create_time: datetime
    update_time: datetime
    content_type: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str = ""
    attempts: int = 0
    max_attempts: int = 0
    start_time: datetime | None = None
    end_time: datetime | None = None
    queue_position: int | None = None  # set only while QUEUED
    progress: float = 0.0
    stage: str = ""
    result: bytes = b""
    result_content_type: str = ""
    error_code: str = ""
    error_message: str = ""
    parent_id: str = ""
    child_index: int = 0
    max_parallel: int = 0
    children: tuple[ChildSummary, ...] = ()
    worker_id: str = ""
    cancel_requested: bool = False
    queue_timeout: timedelta = timedelta(0)
    run_timeout: timedelta = timedelta(0)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class SubmitResult:
    job: Job
    reused: bool


@dataclass(frozen=True)
class ClaimedJob:
    job: Job
    payload: bytes
    lease_id: str
    lease_expire_time: datetime


@dataclass(frozen=True)
class HeartbeatResult:
    lease_expire_time: datetime
    cancel_requested: bool


@dataclass(frozen=True)
class ResultReport:
    """How a worker says an attempt ended (SetResult): COMPLETED, FAILED, or FAILED+retryable."""

    status: JobStatus
    result: bytes = b""
    result_content_type: str = ""
    error_code: str = ""
    error_message: str = ""
    retryable: bool = False


@dataclass(frozen=True)
class ResultRecorded:
    """What record_result did: `applied` is False for a repeat after a lost answer."""

    job: Job
    applied: bool


@dataclass(frozen=True)
class ReportAnswer:
    """What became of one result of report_and_claim: recorded, or refused."""

    job_id: str
    recorded: ResultRecorded | None = None
    #: LeaseLost, JobCancelled or JobNotFound when refused (nothing changed).
    refused: Exception | None = None


@dataclass(frozen=True)
class ReportedAndClaimed:
    results: list[ReportAnswer]
    claimed: list[ClaimedJob]


@dataclass(frozen=True)
class CancelResult:
    job: Job
    cancelled: bool


@dataclass(frozen=True)
class JobEvent:
    """One entry of the audit stream: a single status transition."""

    id: str  # stream position; pass it back as `after` to read on
    job_id: str
    parent_job_id: str
    tenant: str
    model: str
    priority: Priority
    from_status: JobStatus | None  # None when the job was created
    to_status: JobStatus
    attempts: int
    worker_id: str
    error_code: str
    time: datetime
