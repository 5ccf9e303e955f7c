"""The store's data model: plain dataclasses, no grpc, no redis.

Statuses, priorities and kinds mirror the proto enums of the same names
(`jobgate.v1.JobStatus` and so on); each server's `convert.py` maps them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum

from store.errors import InvalidRequest


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
    # RetryJob (redrive): a single job back to QUEUED, a group child back to
    # HELD, a group parent to QUEUED (PROCESSING while a child still runs).
    JobStatus.FAILED: frozenset({JobStatus.QUEUED, JobStatus.HELD}),
    JobStatus.CANCELLED: frozenset({JobStatus.QUEUED, JobStatus.HELD, JobStatus.PROCESSING}),
    JobStatus.PARTIAL: frozenset({JobStatus.QUEUED}),
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
    # --fair-share tenant (True) or off: claims interleave tenants by weight,
    # or keep one FIFO order across tenants. Fixed for a deployment's life.
    fair_share: bool = True


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
    #: The pool the job is bound to ("" = any pool), resolved by the gateway
    #: from JobSpec.pool and the tenant's allowed pools.
    pool: str = ""


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
    #: The tenant's fair-share weight (1..1000) when the request was made;
    #: not part of what the request asks (not in its fingerprint).
    weight: int = 1

    def fingerprint(self) -> str:
        """A digest of everything but the tenant, to tell a retry from a key reuse."""
        return hashlib.sha256(
            json.dumps(_canonical(self), sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()


#: The JobSpec fields every fingerprint spells, set or not (the digest of a
#: keyed job must not change across an upgrade while its key lives).
_FINGERPRINT_ALWAYS = frozenset(
    ("model", "payload", "content_type", "labels", "max_attempts", "queue_timeout", "run_timeout")
)


def _canonical_value(value: object) -> object:
    if isinstance(value, bytes):
        return hashlib.sha256(value).hexdigest()
    if isinstance(value, Mapping):
        return dict(sorted(value.items()))
    if isinstance(value, timedelta):
        return value.total_seconds()
    if value is None:
        return 0
    return value


def _spec_canonical(spec: JobSpec) -> dict[str, object]:
    """Every field of the spec; a field added later only when set, so older digests stay."""
    return {
        f.name: _canonical_value(getattr(spec, f.name))
        for f in dataclasses.fields(spec)
        if f.name in _FINGERPRINT_ALWAYS or getattr(spec, f.name) != f.default
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
    """A snapshot of one job. Stores return fresh copies; mutating one changes nothing.

    Each field is a row of the field table (store/fields.py): metadata
    `stored` (default True) says whether the stores keep it in the job's
    record, `stamps` which transitions set it to the store's clock
    ("always", or "once": only while unset).
    """

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
    #: the last attempt's start (a group's: its first child's), stamped by each claim
    start_time: datetime | None = field(default=None, metadata={"stamps": {"claim": "always"}})
    end_time: datetime | None = None
    #: set only while QUEUED; computed by the reads, never stored
    queue_position: int | None = field(default=None, metadata={"stored": False})
    progress: float = 0.0
    stage: str = ""
    #: kept apart from the record (its own key in Redis)
    result: bytes = field(default=b"", metadata={"stored": False})
    result_content_type: str = ""
    error_code: str = ""
    error_message: str = ""
    parent_id: str = ""
    child_index: int = 0
    max_parallel: int = 0
    #: a group's children, read with it, never stored in its record
    children: tuple[ChildSummary, ...] = field(default=(), metadata={"stored": False})
    worker_id: str = ""
    cancel_requested: bool = False
    queue_timeout: timedelta = timedelta(0)
    run_timeout: timedelta = timedelta(0)
    pool: str = ""

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
    #: The lease's worker (a heartbeat names no worker: the registry learns it here).
    worker_id: str = ""


@dataclass(frozen=True)
class ResultReport:
    """How a worker says an attempt ended (SetResult): COMPLETED, FAILED, or FAILED+retryable."""

    status: JobStatus
    result: bytes = b""
    result_content_type: str = ""
    error_code: str = ""
    error_message: str = ""
    retryable: bool = False

    def __post_init__(self) -> None:
        if self.status not in (JobStatus.COMPLETED, JobStatus.FAILED):
            raise InvalidRequest("status", "must be COMPLETED or FAILED")


#: One result report_and_claim ends: (job_id, lease_id, how the attempt ended).
LeaseResult = tuple[str, str, ResultReport]


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
    #: Who made the transition when it was not the job's own tenant:
    #: "<role>:<tenant>" of the caller (an admin's Cancel or RetryJob:
    #: "admin:ops"); empty for the job's own tenant and for the system.
    actor: str = ""


# -- ListJobs ----------------------------------------------------------------

#: The fields a ListJobs filter may compare; "labels.<key>" besides these.
FILTER_FIELDS = (
    "status",
    "kind",
    "priority",
    "model",
    "pool",
    "parent_id",
    "error_code",
    "tenant",
    "create_time",
)
#: Comparison operators; every field but create_time takes "=" only.
FILTER_OPERATORS = ("=", "<", "<=", ">", ">=")

FilterValue = str | JobStatus | JobKind | Priority | datetime


@dataclass(frozen=True)
class FilterTerm:
    """One comparison of a ListJobs filter: `field op value`.

    `field` is one of FILTER_FIELDS or "labels.<key>"; `value` is typed by
    field: JobStatus for status, JobKind for kind, Priority for priority,
    an aware datetime for create_time, str for the rest.
    """

    field: str
    op: str
    value: FilterValue


@dataclass(frozen=True)
class JobFilter:
    """A parsed ListJobs filter: every term must hold (AND), in the order written.

    The store lets the first term it holds an index for drive the walk and
    checks the others per job.
    """

    terms: tuple[FilterTerm, ...] = ()


@dataclass(frozen=True)
class ListCursor:
    """Where a ListJobs walk stopped: the last job listed (newest first)."""

    create_time: datetime
    job_id: str


@dataclass(frozen=True)
class JobPage:
    jobs: list[Job]
    #: None on the last page.
    next: ListCursor | None


# -- the fleet ---------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSighting:
    """A worker-server saw a worker call it: what `Store.record_workers` writes.

    `age`: how long before the write the call came (the store stamps it with
    its own clock, less the age). `pool` is None when the call did not say
    what the worker serves (a heartbeat or a result names a lease, not a
    pool): the pool and models recorded before are kept.
    """

    worker_id: str
    age: timedelta = timedelta(0)
    pool: str | None = None
    models: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as ListWorkers shows it."""

    worker_id: str
    pool: str
    models: tuple[str, ...]
    last_seen_time: datetime
    job_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueStats:
    """Live jobs of one (model, priority, pool) as ListQueues shows them."""

    model: str
    priority: Priority
    pool: str
    queued: int
    processing: int
    oldest_queued_time: datetime | None = None
