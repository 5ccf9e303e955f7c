"""LocalEngine's state and its state machine: records, queues, counters, deadlines, events.

Every step here is plain synchronous code: a transition made of several
steps runs whole on the one event loop that owns the store. Callers get
fresh `Job` snapshots only; records never leave this package.

Cost: claim and queue position are O(log N) through one `OrderedQueue`
per (model, priority); lease, run, retry, queue-timeout and TTL deadlines
sit in heaps, so recovery pops only what fell due (entries made stale by a
later transition are skipped).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from store import fields, policy
from store.errors import InvalidRequest, JobNotFound
from store.memory.changes import IN_MEMORY, Changes
from store.memory.deadlines import (
    Deadlines,
    expiry_is_current,
    lease_is_current,
    queue_wait_is_current,
    retry_is_current,
    run_is_current,
)
from store.memory.index import Index
from store.memory.queue import OrderedQueue
from store.memory.record import Record
from store.model import (
    ERROR_ATTEMPTS_EXHAUSTED,
    ERROR_CANCELLED,
    ERROR_LEASE_EXPIRED,
    ERROR_QUEUE_TIMEOUT,
    ERROR_RUN_TIMEOUT,
    PRIORITIES_IN_CLAIM_ORDER,
    TERMINAL_STATUSES,
    TRANSITIONS,
    ChildSummary,
    ClaimedJob,
    Job,
    JobEvent,
    JobKind,
    JobStatus,
    Priority,
    StoreSettings,
)

#: (model, priority, pool): one ready queue ("" pool: the any-pool one).
QueueKey = tuple[str, Priority, str]


@functools.lru_cache(maxsize=64)
def dt(timestamp: float) -> datetime:
    """An epoch time as a datetime. Cached: a transition converts its one `now`
    for the event, update_time and the stamps, and the answers of a batch share
    their create_time (a hit costs a sixth of a conversion)."""
    return datetime.fromtimestamp(timestamp, tz=UTC)


#: How a snapshot spells each stored field's conversion from the Record's value.
_CONVERSIONS = {
    fields.Kind.TIME: "dt({})",
    fields.Kind.OPTIONAL_TIME: "(None if {0} is None else dt({0}))",
    fields.Kind.DURATION: "timedelta(seconds={})",
    fields.Kind.LABELS: "dict({})",
}


def _snapshot_source() -> str:
    """`snapshot(record, queue_position, children)`: a Job of every stored field of a
    Record, converted. Written out from the field table once, as dataclasses
    writes an __init__ (the same loop run per snapshot cost about 10 us of a
    job's ~100), and filling the new Job's __dict__ directly: Job is frozen, so
    its __init__ sets each field through object.__setattr__ (4.2 us a Job
    against 0.3). Every field of Job is given (checked below)."""
    values = [
        f"{f.name}={_CONVERSIONS.get(f.kind, '{}').format('record.' + f.name)}"
        for f in fields.STORED
    ]
    values += ["queue_position=queue_position", "result=record.result", "children=children"]
    return (
        "def snapshot(record, queue_position, children):\n"
        "    job = new(Job)\n"
        "    job.__dict__.update(\n        " + ",\n        ".join(values) + ",\n    )\n"
        "    return job\n"
    )


def _snapshot_function() -> Callable[[Record, int | None, tuple[ChildSummary, ...]], Job]:
    given = {f.name for f in fields.STORED} | {"queue_position", "result", "children"}
    missing = {f.name for f in dataclasses.fields(Job)} - given
    if missing:  # a field the table neither stores nor computes here would be unset
        raise TypeError(f"LocalEngine's snapshot does not fill Job.{sorted(missing)}")
    namespace: dict[str, Any] = {"Job": Job, "new": object.__new__, "dt": dt}
    namespace["timedelta"] = timedelta
    exec(_snapshot_source(), namespace)  # field names from Job's own dataclass
    return namespace["snapshot"]  # type: ignore[no-any-return]


#: A Job from a Record: every stored field, from the table.
_snapshot = _snapshot_function()


def event_number(event_id: str) -> int:
    """Accept "N" (ours) and "N-M" (Redis stream style) positions."""
    try:
        return int(event_id.split("-", 1)[0])
    except ValueError:
        raise InvalidRequest("after", f"not an event id: {event_id!r}") from None


class State:
    """Everything LocalEngine holds, and the steps its transitions are made of."""

    def __init__(
        self, settings: StoreSettings, clock: Callable[[], float], changes: Changes = IN_MEMORY
    ) -> None:
        self.settings = settings
        self.clock = clock
        #: told of every change (store/memory/changes.py): the durable store persists them
        self.changes = changes
        self.jobs: dict[str, Record] = {}
        self.keys: dict[tuple[str, str], str] = {}
        self.queues: dict[QueueKey, OrderedQueue] = {}
        self.seq = 0  # the last FIFO score (fair share off)
        # fair share: the pass last handed out per (model, priority), and each
        # tenant's last pass per (model, priority, tenant) (store/policy.py next_pass)
        self.floors: dict[tuple[str, Priority], float] = {}
        self.passes: dict[tuple[str, Priority, str], float] = {}
        self.live_by_tenant: dict[str, int] = {}
        self.live_total = 0
        self.in_flight: dict[str, int] = {}  # queue class -> PROCESSING jobs
        # Deadline heaps; an entry is acted on only if the record still matches it.
        self.leases = Deadlines(lease_is_current)
        self.runs = Deadlines(run_is_current)
        self.retries = Deadlines(retry_is_current)
        self.queue_waits = Deadlines(queue_wait_is_current)
        self.expiries = Deadlines(expiry_is_current)
        self.events: list[JobEvent] = []
        self.first_event = 1
        self.next_event = 1
        self.captured: list[JobEvent] | None = None
        # queue classes that got a claimable job since the last wake-up
        self.claimable_models: set[str] = set()
        # ListJobs' sorted runs, kept by emit (every status change) and purge
        self.index = Index()
        # who acts in the transition now running, when not the job's tenant
        # (an admin's Cancel or RetryJob: "admin:ops"); JobEvent.actor
        self.actor = ""

    @contextlib.contextmanager
    def acting(self, actor: str) -> Iterator[None]:
        """The events of the transition made inside name `actor` (JobEvent.actor)."""
        self.actor = actor
        try:
            yield
        finally:
            self.actor = ""

    def keyed(self, tenant: str, key: str, now: float) -> Record | None:
        job_id = self.keys.get((tenant, key))
        if job_id is None:
            return None
        record = self.fresh(job_id, now)
        if record is None:
            self.keys.pop((tenant, key), None)
        return record

    def next_ready(self, classes: Iterable[str]) -> Record | None:
        """The job claimed next from the queue classes' queues: the highest priority,
        then the lowest (score, id) across them."""
        queues = [policy.class_parts(job_class) for job_class in classes]
        for priority in PRIORITIES_IN_CLAIM_ORDER:
            heads = [
                head
                for model, pool in queues
                if (queue := self.queues.get((model, priority, pool))) is not None
                and (head := queue.first()) is not None
            ]
            if heads:
                return self.jobs[min(heads)[1]]
        return None

    def lease(self, record: Record, worker_id: str, now: float) -> ClaimedJob:
        self.queue_of(record).take(record.id)
        if record.weight > 0:  # fair share: new passes start from what was handed out
            key = (record.model, record.priority)
            self.floors[key] = max(self.floors.get(key, 0.0), record.seq)
        record.attempts += 1
        record.worker_id = worker_id
        record.lease_id = uuid.uuid4().hex
        record.outcome = None
        record.cancel_requested = False
        policy.stamp(record, "claim", now)
        record.lease_deadline = now + self.settings.lease_timeout.total_seconds()
        self.push(self.leases, record.lease_deadline, record, record.lease_id)
        # A zero run_timeout means none (as RedisStore), not "already past".
        if record.run_timeout > 0:
            record.run_deadline = now + record.run_timeout
            self.push(self.runs, record.run_deadline, record, record.lease_id)
        self.transition(record, JobStatus.PROCESSING, now)
        if record.parent_id:
            parent = self.jobs[record.parent_id]
            if parent.status is JobStatus.QUEUED:
                parent.start_time = now
                self.transition(parent, JobStatus.PROCESSING, now)
        return ClaimedJob(
            job=self.snapshot(record),
            payload=self.changes.payload(record),
            lease_id=record.lease_id,
            lease_expire_time=dt(record.lease_deadline),
        )

    def record_of(self, job_id: str) -> Record:
        """The job a worker's call names (any tenant's), else JobNotFound."""
        record = self.fresh(job_id, self.clock())
        if record is None:
            raise JobNotFound(f"job {job_id} not found", job_id=job_id)
        return record

    # -- transitions ---------------------------------------------------------

    def transition(self, record: Record, to: JobStatus, now: float) -> None:
        before = record.status
        if to not in TRANSITIONS[before]:
            raise RuntimeError(f"job {record.id}: illegal transition {before} -> {to}")
        record.status = to
        record.update_time = now
        if record.kind is not JobKind.GROUP:
            if before is JobStatus.PROCESSING:
                self.in_flight[policy.queue_class(record.model, record.pool)] -= 1
            if to is JobStatus.PROCESSING:
                job_class = policy.queue_class(record.model, record.pool)
                self.in_flight[job_class] = self.in_flight.get(job_class, 0) + 1
        self.emit(record, before, now)

    def emit(self, record: Record, before: JobStatus | None, now: float) -> None:
        event = JobEvent(
            id=str(self.next_event),
            job_id=record.id,
            parent_job_id=record.parent_id,
            tenant=record.tenant,
            model=record.model,
            priority=record.priority,
            from_status=before,
            to_status=record.status,
            attempts=record.attempts,
            worker_id=record.worker_id,
            error_code=record.error_code,
            time=dt(now),
            actor=self.actor,
        )
        self.index.moved(record, before)
        self.next_event += 1
        self.events.append(event)
        self.changes.emitted(record, event)
        if self.captured is not None:
            self.captured.append(event)
        cap = max(1, self.settings.events_max_length)
        if len(self.events) > cap + max(1, cap // 10):
            del self.events[: len(self.events) - cap]
            self.first_event = int(self.events[0].id)

    def enqueue(self, record: Record, now: float) -> None:
        """First QUEUED: the job gets the next score of its queue (common.lua next_score)."""
        record.seq = self.next_score(record)
        self.queue_of(record).append(record.id, record.seq)
        self.claimable_models.add(policy.queue_class(record.model, record.pool))
        self.start_queue_clock(record, now)

    def next_score(self, record: Record) -> float:
        """Weight 0 (fair share off): one FIFO counter; else the tenant's next pass."""
        if record.weight <= 0:
            self.seq += 1
            return float(self.seq)
        tenant = (record.model, record.priority, record.tenant)
        floor = self.floors.get((record.model, record.priority), 0.0)
        score = policy.next_pass(self.passes.get(tenant, 0.0), floor, record.weight)
        self.passes[tenant] = score
        return score

    def start_queue_clock(self, record: Record, now: float) -> None:
        # A zero queue_timeout means none (as RedisStore), not "already past".
        if record.queue_timeout > 0:
            record.queue_deadline = now + record.queue_timeout
            self.push(self.queue_waits, record.queue_deadline, record)

    def queue_of(self, record: Record) -> OrderedQueue:
        key = (record.model, record.priority, record.pool)
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = OrderedQueue()
        return queue

    def end(self, record: Record, to: JobStatus, now: float) -> None:
        """A single job or a child reaches a terminal status."""
        was_active = record.status in (JobStatus.QUEUED, JobStatus.PROCESSING)
        self.transition(record, to, now)
        record.end_time = now
        record.ready_at = 0.0
        self.queue_of(record).forget(record.id)
        self.live_by_tenant[record.tenant] -= 1
        self.live_total -= 1
        if record.parent_id:
            self.child_ended(record, was_active, now)
        else:
            self.set_expiry(record, now)

    def ended_with_its_group(self, record: Record, now: float) -> bool:
        """A child of a cancelled group ends CANCELLED instead of going back to its
        queue: a running child may finish its attempt after its group was
        cancelled, but a requeue would queue work for a cancelled group. True if it did."""
        parent = self.jobs.get(record.parent_id)
        if parent is None or parent.status is not JobStatus.CANCELLED:
            return False
        record.error_code = ERROR_CANCELLED
        record.error_message = policy.GROUP_CANCELLED_MESSAGE
        self.end(record, JobStatus.CANCELLED, now)
        return True

    def retry_or_exhaust(
        self, record: Record, error_code: str, error_message: str, now: float, *, backoff: bool
    ) -> None:
        """End an attempt that may be retried: requeue it, or fail it past max_attempts."""
        if self.ended_with_its_group(record, now):
            return
        if record.attempts >= record.max_attempts:
            record.error_code = ERROR_ATTEMPTS_EXHAUSTED
            record.error_message = policy.exhausted_message(error_code, error_message)
            self.end(record, JobStatus.FAILED, now)
            return
        record.error_code, record.error_message = error_code, error_message
        self.transition(record, JobStatus.QUEUED, now)
        self.start_queue_clock(record, now)
        if backoff:
            record.ready_at = (
                now + policy.retry_delay(record.attempts, self.settings).total_seconds()
            )
            self.push(self.retries, record.ready_at, record)
        else:
            self.queue_of(record).restore(record.id)
            self.claimable_models.add(policy.queue_class(record.model, record.pool))

    def release(self, record: Record, now: float) -> None:
        """PROCESSING -> QUEUED as if the claim never happened (release.lua's twin)."""
        record.attempts -= 1
        record.lease_id = ""  # a late heartbeat or set_result with it is LEASE_LOST
        if self.ended_with_its_group(record, now):
            return
        self.transition(record, JobStatus.QUEUED, now)
        self.start_queue_clock(record, now)
        self.queue_of(record).restore(record.id)
        self.claimable_models.add(policy.queue_class(record.model, record.pool))

    def cancel_job(self, record: Record, reason: str, now: float) -> None:
        record.cancel_requested = record.status is JobStatus.PROCESSING
        record.error_code, record.error_message = ERROR_CANCELLED, reason
        self.end(record, JobStatus.CANCELLED, now)

    def cancel_group(self, parent: Record, reason: str, now: float) -> None:
        parent.cancel_requested = parent.status is JobStatus.PROCESSING
        parent.error_code, parent.error_message = ERROR_CANCELLED, reason
        self.transition(parent, JobStatus.CANCELLED, now)
        parent.end_time = now
        for child_id in parent.children:
            child = self.jobs[child_id]
            if child.status in (JobStatus.HELD, JobStatus.QUEUED):
                self.cancel_job(child, reason, now)
        self.maybe_expire_group(parent, now)

    # -- groups --------------------------------------------------------------

    def release_held(self, parent: Record, now: float) -> None:
        """Queue held children, lowest index first, while max_parallel allows."""
        while parent.next_held < len(parent.children) and (
            parent.max_parallel == 0 or parent.active_children < parent.max_parallel
        ):
            child = self.jobs[parent.children[parent.next_held]]
            parent.next_held += 1
            if child.status is not JobStatus.HELD:
                continue
            self.transition(child, JobStatus.QUEUED, now)
            parent.active_children += 1
            self.enqueue(child, now)

    def child_ended(self, child: Record, was_active: bool, now: float) -> None:
        parent = self.jobs[child.parent_id]
        parent.ended_children += 1
        if child.status is JobStatus.COMPLETED:
            parent.completed_children += 1
        if was_active:
            parent.active_children -= 1
        if parent.status in TERMINAL_STATUSES:
            self.maybe_expire_group(parent, now)
            return
        total = len(parent.children)
        parent.progress = parent.ended_children / total
        parent.update_time = now
        self.release_held(parent, now)
        if parent.ended_children == total:
            self.finish_group(parent, now)

    def finish_group(self, parent: Record, now: float) -> None:
        final, parent.error_message = policy.group_outcome(
            len(parent.children), parent.completed_children
        )
        self.transition(parent, final, now)
        parent.end_time = now
        self.maybe_expire_group(parent, now)

    def maybe_expire_group(self, parent: Record, now: float) -> None:
        """Once the parent and every child are terminal, they all expire together."""
        if parent.ended_children == len(parent.children) and parent.expire_at is None:
            self.set_expiry(parent, now)

    def set_expiry(self, record: Record, now: float) -> None:
        record.expire_at = now + self.settings.result_ttl.total_seconds()
        for child_id in record.children:
            child = self.jobs[child_id]
            child.expire_at = record.expire_at
            self.changes.touched(child)  # no event of its own
        self.expiries.push(record.expire_at, record.id)

    # -- recovery ------------------------------------------------------------

    def push(self, deadlines: Deadlines, deadline: float, record: Record, token: str = "") -> None:
        deadlines.push(deadline, record.id, token)
        deadlines.sweep(self.jobs, self.live_total)

    def recover_run_timeouts(self, now: float) -> None:
        for record in self.runs.due(now, self.jobs):
            message = policy.RUN_TIMEOUT_MESSAGE.format(attempts=record.attempts)
            self.retry_or_exhaust(record, ERROR_RUN_TIMEOUT, message, now, backoff=True)

    def recover_leases(self, now: float) -> None:
        for record in self.leases.due(now, self.jobs):
            message = policy.LEASE_EXPIRED_MESSAGE.format(attempts=record.attempts)
            self.retry_or_exhaust(record, ERROR_LEASE_EXPIRED, message, now, backoff=False)

    def recover_retries(self, now: float) -> bool:
        promoted = False
        for record in self.retries.due(now, self.jobs):
            record.ready_at = 0.0
            self.changes.touched(record)  # no event: still QUEUED, now claimable
            self.queue_of(record).restore(record.id)
            self.claimable_models.add(policy.queue_class(record.model, record.pool))
            promoted = True
        return promoted

    def recover_queue_timeouts(self, now: float) -> None:
        for record in self.queue_waits.due(now, self.jobs):
            record.error_code = ERROR_QUEUE_TIMEOUT
            record.error_message = policy.QUEUE_TIMEOUT_MESSAGE
            self.end(record, JobStatus.FAILED, now)

    def recover_expiries(self, now: float) -> None:
        for record in self.expiries.due(now, self.jobs):
            self.fresh(record.id, now)

    # -- reads ---------------------------------------------------------------

    def fresh(self, job_id: str, now: float) -> Record | None:
        """The record, unless its result_ttl ran out (then it is dropped)."""
        record = self.jobs.get(job_id)
        if record is not None and record.expire_at is not None and record.expire_at <= now:
            self.purge(record)
            return None
        return record

    def purge(self, record: Record) -> None:
        if record.parent_id and record.parent_id in self.jobs:
            record = self.jobs[record.parent_id]
        for job_id in [*record.children, record.id]:
            gone = self.jobs.pop(job_id, None)
            if gone:
                self.index.removed(gone)
            if gone and gone.idempotency_key and not gone.parent_id:
                key = (gone.tenant, gone.idempotency_key)
                if self.keys.get(key) == job_id:
                    del self.keys[key]

    def visible_record(self, tenant: str | None, job_id: str) -> Record:
        """The job, if `tenant` may see it (None: any tenant's, for an admin)."""
        record = self.fresh(job_id, self.clock())
        if record is None or (tenant is not None and record.tenant != tenant):
            raise JobNotFound(f"job {job_id} not found", job_id=job_id)
        return record

    def position(self, record: Record) -> int | None:
        """Jobs the workers of the job's pool claim before it (snapshot.lua's twin)."""
        if record.status is not JobStatus.QUEUED or record.kind is JobKind.GROUP:
            return None
        own = self.queues.get((record.model, record.priority, record.pool))
        if own is None or record.id not in own:
            return None
        pools = (record.pool, "") if record.pool else ("",)
        ahead = 0
        for pool in pools:
            queue = self.queues.get((record.model, record.priority, pool))
            if queue is not None:
                ahead += queue.before(record.seq, record.id)
            for priority in PRIORITIES_IN_CLAIM_ORDER:
                if priority >= record.priority:
                    break
                higher = self.queues.get((record.model, priority, pool))
                ahead += len(higher) if higher else 0
        return ahead

    def snapshot(self, record: Record) -> Job:
        children: tuple[ChildSummary, ...] = ()
        if record.kind is JobKind.GROUP:
            children = tuple(
                ChildSummary(
                    id=child.id,
                    child_index=child.child_index,
                    status=child.status,
                    error_code=child.error_code,
                )
                for child in (self.jobs[child_id] for child_id in record.children)
            )
        return _snapshot(record, self.position(record), children)

    def events_after(self, start: int, count: int) -> list[JobEvent]:
        index = max(0, start + 1 - self.first_event)
        return self.events[index : index + max(0, count)]
