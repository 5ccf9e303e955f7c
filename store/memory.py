"""LocalStore: the whole Store protocol in memory (the embedded store of `jobgate serve`).

Atomicity: every transition is plain synchronous code with no `await` inside,
so on the one event loop that owns the store each transition runs whole;
waiters (claim long-polls, watch, events) sleep on asyncio.Events that
transitions set. Callers only ever get fresh `Job` snapshots. Wake-ups are
routed like RedisStore's messages: a change wakes the watchers of the jobs it
touched (and of jobs queued for the same model, whose positions move) and
the claims of the models that got a claimable job, never every waiter.

Cost: claim and queue position are O(log N) through one `_OrderedQueue`
(a Fenwick tree over submit slots) per (model, priority); lease, run,
retry, queue-timeout and TTL deadlines sit in heaps, so `recover` pops only
what fell due (entries made stale by a later transition are skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ulid import ULID

from store import policy
from store.errors import (
    FailureHook,
    IdempotencyKeyReused,
    InvalidRequest,
    JobCancelled,
    JobNotFound,
    LeaseLost,
    QueueFull,
    QuotaExceeded,
    StoreError,
    StoreUnavailable,
    ignore_failure,
    reporting,
)
from store.model import (
    ERROR_ATTEMPTS_EXHAUSTED,
    ERROR_CANCELLED,
    ERROR_LEASE_EXPIRED,
    ERROR_QUEUE_TIMEOUT,
    ERROR_RUN_TIMEOUT,
    PRIORITIES_IN_CLAIM_ORDER,
    TERMINAL_STATUSES,
    TRANSITIONS,
    CancelResult,
    ChildSummary,
    ClaimedJob,
    GroupSpec,
    HeartbeatResult,
    Job,
    JobEvent,
    JobKind,
    JobSpec,
    JobStatus,
    Priority,
    ReportAnswer,
    ReportedAndClaimed,
    ResultRecorded,
    ResultReport,
    StoreSettings,
    SubmitRequest,
    SubmitResult,
)
from store.protocol import Store

QueueKey = tuple[str, Priority]
# What a set_result asked for, to recognise a repeat after a lost answer.
Outcome = tuple[JobStatus, bool, str, bytes]


class _Waiters:
    """In-process wake-ups by topic: "j <id>" (a job changed), "q <model>" (its
    queue moved) and "r <model>" (a job became claimable). Each waiter owns one
    Event, set by a wake-up of any of its topics; it clears it before reading
    the state, so a change made after the read is never missed.
    """

    def __init__(self) -> None:
        self._by_topic: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def listen(self, event: asyncio.Event, topics: Iterable[str]) -> Iterator[set[str]]:
        """Register `event` under `topics`; the yielded set may grow (see `add`)."""
        listened: set[str] = set()
        for topic in topics:
            self.add(event, topic, listened)
        try:
            yield listened
        finally:
            for topic in listened:
                waiting = self._by_topic.get(topic)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._by_topic[topic]

    def add(self, event: asyncio.Event, topic: str, listened: set[str]) -> None:
        if topic not in listened:
            listened.add(topic)
            self._by_topic.setdefault(topic, set()).add(event)

    def count(self, topic: str) -> int:
        return len(self._by_topic.get(topic, ()))

    def wake(self, topics: Iterable[str]) -> None:
        for topic in topics:
            for event in self._by_topic.get(topic, ()):
                event.set()

    def wake_all(self) -> None:
        self.wake(list(self._by_topic))


class _OrderedQueue:
    """Job ids of one (model, priority) in slot order, with O(log N) first, rank and moves.

    Each job owns a slot from its first enqueue until it ends; `take` and
    `restore` hide and show it at that slot, so a requeued job gets its
    original place back. A Fenwick tree counts the visible slots.
    """

    def __init__(self) -> None:
        self._tree: list[int] = [0]  # 1-based Fenwick tree of visible flags
        self._owner: list[str] = [""]  # slot -> job id ("" once forgotten)
        self._visible: list[bool] = [False]
        self._slot_of: dict[str, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._slot_of

    def append(self, job_id: str) -> None:
        """Give `job_id` the next slot, visible."""
        if len(self._owner) > 2 * len(self._slot_of) + 64:
            self._compact()
        slot = len(self._owner)
        below = self._prefix(slot - 1) - self._prefix(slot - (slot & -slot))
        self._tree.append(1 + below)
        self._owner.append(job_id)
        self._visible.append(True)
        self._slot_of[job_id] = slot
        self._size += 1

    def take(self, job_id: str) -> None:
        """Hide the job (claimed, or waiting out a backoff); it keeps its slot."""
        slot = self._slot_of[job_id]
        if self._visible[slot]:
            self._visible[slot] = False
            self._add(slot, -1)
            self._size -= 1

    def restore(self, job_id: str) -> None:
        """Show the job again at its original slot."""
        slot = self._slot_of[job_id]
        if not self._visible[slot]:
            self._visible[slot] = True
            self._add(slot, 1)
            self._size += 1

    def forget(self, job_id: str) -> None:
        """Give up the job's slot for good (it ended)."""
        if job_id not in self._slot_of:
            return
        self.take(job_id)
        slot = self._slot_of.pop(job_id)
        self._owner[slot] = ""

    def is_visible(self, job_id: str) -> bool:
        slot = self._slot_of.get(job_id)
        return slot is not None and self._visible[slot]

    def first(self) -> str | None:
        """The visible job with the lowest slot."""
        if self._size == 0:
            return None
        position, remaining = 0, 1
        step = 1 << (len(self._tree) - 1).bit_length()
        while step:
            candidate = position + step
            if candidate < len(self._tree) and self._tree[candidate] < remaining:
                position = candidate
                remaining -= self._tree[candidate]
            step >>= 1
        return self._owner[position + 1]

    def rank(self, job_id: str) -> int:
        """Visible jobs in slots before this job's slot."""
        return self._prefix(self._slot_of[job_id] - 1)

    def _prefix(self, slot: int) -> int:
        total = 0
        while slot > 0:
            total += self._tree[slot]
            slot -= slot & -slot
        return total

    def _add(self, slot: int, delta: int) -> None:
        while slot < len(self._tree):
            self._tree[slot] += delta
            slot += slot & -slot

    def _compact(self) -> None:
        """Renumber the owned slots densely (amortised O(log N) per append)."""
        owners = sorted(self._slot_of.items(), key=lambda item: item[1])
        visible = [self._visible[slot] for _, slot in owners]
        self._tree, self._owner, self._visible = [0], [""], [False]
        self._slot_of, self._size = {}, 0
        for (job_id, _), shown in zip(owners, visible, strict=True):
            self.append(job_id)
            if not shown:
                self.take(job_id)


@dataclass(slots=True)
class _Record:
    """The stored, mutable state of one job; never handed out."""

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
    # Bookkeeping below is not part of the Job snapshot.
    seq: int = 0  # global enqueue order, to compare heads of different models
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


Current = Callable[["_Record", float, str], bool]


class _Deadlines:
    """One kind of deadline in a min-heap of (deadline, job id, token).

    Entries are never removed when a transition makes them stale; `due`
    skips them, and `push` sweeps them out once they outnumber the live jobs
    twice over, so memory stays proportional to live jobs.
    """

    def __init__(self, is_current: Current) -> None:
        self._heap: list[tuple[float, str, str]] = []
        self._is_current = is_current

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, deadline: float, job_id: str, token: str = "") -> None:
        heapq.heappush(self._heap, (deadline, job_id, token))

    def sweep(self, jobs: dict[str, _Record], live: int) -> None:
        if len(self._heap) <= 2 * live + 1024:
            return
        self._heap = [entry for entry in self._heap if self._current(jobs, entry)]
        heapq.heapify(self._heap)

    def due(self, now: float, jobs: dict[str, _Record]) -> Iterator[_Record]:
        """Pop every entry due by `now`; yield the records each still applies to."""
        while self._heap and self._heap[0][0] <= now:
            entry = heapq.heappop(self._heap)
            if self._current(jobs, entry):
                yield jobs[entry[1]]

    def _current(self, jobs: dict[str, _Record], entry: tuple[float, str, str]) -> bool:
        record = jobs.get(entry[1])
        return record is not None and self._is_current(record, entry[0], entry[2])


def _lease_is_current(record: _Record, deadline: float, lease_id: str) -> bool:
    return (
        record.status is JobStatus.PROCESSING
        and record.lease_id == lease_id
        and record.lease_deadline == deadline
    )


def _run_is_current(record: _Record, deadline: float, lease_id: str) -> bool:
    return record.status is JobStatus.PROCESSING and record.lease_id == lease_id


def _retry_is_current(record: _Record, ready_at: float, _: str) -> bool:
    return record.status is JobStatus.QUEUED and record.ready_at == ready_at


def _queue_wait_is_current(record: _Record, deadline: float, _: str) -> bool:
    return record.status is JobStatus.QUEUED and record.queue_deadline == deadline


def _expiry_is_current(record: _Record, expire_at: float, _: str) -> bool:
    return record.expire_at == expire_at


def _dt(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)


def _optional_dt(timestamp: float | None) -> datetime | None:
    return None if timestamp is None else _dt(timestamp)


def _event_number(event_id: str) -> int:
    """Accept "N" (ours) and "N-M" (Redis stream style) positions."""
    try:
        return int(event_id.split("-", 1)[0])
    except ValueError:
        raise InvalidRequest("after", f"not an event id: {event_id!r}") from None


class LocalStore(Store):
    """The Store protocol in process memory. Not durable: state dies with the process."""

    def __init__(self, settings: StoreSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.on_failure: FailureHook = ignore_failure
        self._clock = clock
        self._closed = False
        self._jobs: dict[str, _Record] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._queues: dict[QueueKey, _OrderedQueue] = {}
        self._seq = 0
        self._live_by_tenant: dict[str, int] = {}
        self._live_total = 0
        self._in_flight: dict[str, int] = {}
        # Deadline heaps; an entry is acted on only if the record still matches it.
        self._leases = _Deadlines(_lease_is_current)
        self._runs = _Deadlines(_run_is_current)
        self._retries = _Deadlines(_retry_is_current)
        self._queue_waits = _Deadlines(_queue_wait_is_current)
        self._expiries = _Deadlines(_expiry_is_current)
        self._events: list[JobEvent] = []
        self._first_event = 1
        self._next_event = 1
        self._captured: list[JobEvent] | None = None
        self._leader: tuple[str, float] | None = None
        # Replaced on every wake-up: event readers hold the old one, which gets set.
        self._changed = asyncio.Event()
        self._waiters = _Waiters()
        self._claimable_models: set[str] = set()  # got a claimable job since the last wake-up
        self._woken_through = 1  # events numbered below this have woken their waiters

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        self._wake()

    async def ping(self) -> None:
        self._check_open("ping")

    # -- tenant-facing -------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> SubmitResult:
        self._check_open("submit")
        now = self._clock()
        key = request.idempotency_key
        # Only a keyed request is ever compared, so only it pays for the digest.
        fingerprint = request.fingerprint() if key else ""
        if key:
            existing = self._keyed(request.tenant, key, now)
            if existing is not None:
                if existing.fingerprint != fingerprint:
                    raise IdempotencyKeyReused(
                        f"idempotency key {key!r} was used for a different request",
                        job_id=existing.id,
                    )
                return SubmitResult(self._snapshot(existing), reused=True)
        self._admit(request)
        record = self._create(request, fingerprint, now)
        self._wake()
        return SubmitResult(self._snapshot(record), reused=False)

    async def submit_batch(self, requests: Sequence[SubmitRequest]) -> list[SubmitResult]:
        self._check_open("submit_batch")
        now = self._clock()
        plan = self._plan_batch(requests, now)  # every check first: all or nothing
        records: list[_Record] = []
        for request, (fingerprint, source) in zip(requests, plan, strict=True):
            if isinstance(source, int):
                records.append(records[source])  # an earlier item of this batch made it
            elif source is not None:
                records.append(source)
            else:
                records.append(self._create(request, fingerprint, now))
        if any(source is None for _, source in plan):
            self._wake()
        return [
            SubmitResult(self._snapshot(record), reused=source is not None)
            for record, (_, source) in zip(records, plan, strict=True)
        ]

    async def get(self, tenant: str, job_id: str) -> Job:
        self._check_open("get")
        return self._snapshot(self._visible_record(tenant, job_id))

    async def payload(self, tenant: str, job_id: str) -> bytes:
        self._check_open("payload")
        return self._visible_record(tenant, job_id).payload

    async def list_children(self, tenant: str, job_id: str) -> list[Job]:
        self._check_open("list_children")
        record = self._visible_record(tenant, job_id)
        return [self._snapshot(self._jobs[child]) for child in record.children]

    async def cancel(self, tenant: str, job_id: str, reason: str = "") -> CancelResult:
        self._check_open("cancel")
        now = self._clock()
        record = self._visible_record(tenant, job_id)
        if record.status in TERMINAL_STATUSES:
            return CancelResult(self._snapshot(record), cancelled=False)
        if record.kind is JobKind.GROUP:
            self._cancel_group(record, reason, now)
        else:
            self._cancel_job(record, reason, now)
        self._wake()
        return CancelResult(self._snapshot(record), cancelled=True)

    async def watch(self, tenant: str, job_id: str) -> AsyncIterator[Job]:
        self._check_open("watch")
        self._visible_record(tenant, job_id)
        last: tuple[object, ...] | None = None
        woken, moved = asyncio.Event(), asyncio.Event()
        with (
            self._waiters.listen(woken, [f"j {job_id}"]),
            self._waiters.listen(moved, []) as topics,
        ):
            while True:
                woken.clear()  # before the read: a change after it is kept
                moved.clear()
                record = self._fresh(job_id, self._clock())
                if record is None:
                    return
                job = self._snapshot(record)
                if job.status is JobStatus.QUEUED and job.kind is not JobKind.GROUP:
                    self._waiters.add(moved, f"q {job.model}", topics)  # positions move
                view = policy.watch_view(job)
                if view != last:
                    last = view
                    yield job
                if job.terminal or self._closed:
                    return
                await _settled(woken, moved)

    # -- worker-facing -------------------------------------------------------

    async def claim(
        self,
        worker_id: str,
        models: Sequence[str],
        max_jobs: int = 1,
        wait: timedelta = timedelta(0),
    ) -> list[ClaimedJob]:
        self._check_open("claim")
        deadline = time.monotonic() + wait.total_seconds()
        wanted = policy.claim_models(models)
        if not wanted:
            return []
        woken = asyncio.Event()
        with self._waiters.listen(woken, [f"r {model}" for model in wanted]):
            while True:
                woken.clear()
                claimed = self._claim_now(worker_id, wanted, policy.claim_limit(max_jobs))
                if claimed or self._closed:
                    return claimed
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                try:
                    async with asyncio.timeout(remaining):
                        await woken.wait()
                except TimeoutError:
                    return []

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` (tests, debugging), as RedisStore's."""
        return self._waiters.count(f"r {model}")

    async def release(self, leases: Sequence[ClaimedJob]) -> int:
        self._check_open("release")
        now = self._clock()
        released = 0
        for item in leases:
            record = self._fresh(item.job.id, now)
            if record is None or record.status is not JobStatus.PROCESSING:
                continue
            if record.lease_id != item.lease_id:
                continue
            self._release(record, now)
            released += 1
        if released:
            self._wake()
        return released

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult:
        self._check_open("heartbeat")
        now = self._clock()
        record = self._leased(job_id, lease_id)
        if record.status is JobStatus.CANCELLED and record.cancel_requested:
            return HeartbeatResult(_dt(record.lease_deadline), cancel_requested=True)
        if record.status is not JobStatus.PROCESSING:
            raise LeaseLost(f"lease {lease_id} of job {job_id} has ended", job_id=job_id)
        record.lease_deadline = now + self.settings.lease_timeout.total_seconds()
        self._push(self._leases, record.lease_deadline, record, lease_id)
        progress = min(1.0, max(0.0, progress))
        stage = stage or record.stage
        if (progress, stage) != (record.progress, record.stage):
            record.progress, record.stage = progress, stage
            record.update_time = now
            self._wake(record.id)  # progress changes are not events
        return HeartbeatResult(_dt(record.lease_deadline), cancel_requested=False)

    async def record_result(
        self, job_id: str, lease_id: str, report: ResultReport
    ) -> ResultRecorded:
        self._check_open("set_result")
        if report.status not in (JobStatus.COMPLETED, JobStatus.FAILED):
            raise InvalidRequest("status", "must be COMPLETED or FAILED")
        now = self._clock()
        record = self._leased(job_id, lease_id)
        outcome: Outcome = (report.status, report.retryable, report.error_code, report.result)
        if record.status is JobStatus.CANCELLED and record.cancel_requested:
            raise JobCancelled(f"job {job_id} was cancelled", job_id=job_id)
        if record.status is not JobStatus.PROCESSING:
            if record.outcome == outcome:
                return ResultRecorded(self._snapshot(record), applied=False)
            raise LeaseLost(f"lease {lease_id} of job {job_id} has ended", job_id=job_id)
        record.outcome = outcome
        if report.status is JobStatus.COMPLETED:
            record.result = report.result
            record.result_content_type = report.result_content_type
            record.error_code = record.error_message = ""
            record.progress = 1.0
            self._end(record, JobStatus.COMPLETED, now)
        elif report.retryable:
            code, message = report.error_code, report.error_message
            self._retry_or_exhaust(record, code, message, now, backoff=True)
        else:
            record.error_code, record.error_message = report.error_code, report.error_message
            self._end(record, JobStatus.FAILED, now)
        self._wake()
        return ResultRecorded(self._snapshot(record), applied=True)

    async def report_and_claim(
        self,
        worker_id: str,
        models: Sequence[str],
        results: Sequence[tuple[str, str, ResultReport]],
        max_jobs: int,
    ) -> ReportedAndClaimed:
        # One step: nothing here awaits, so no other call runs in between.
        answers = []
        for job_id, lease_id, report in results:
            try:
                recorded = await self.record_result(job_id, lease_id, report)
            except (LeaseLost, JobCancelled, JobNotFound) as refused:
                answers.append(ReportAnswer(job_id, refused=refused))
            else:
                answers.append(ReportAnswer(job_id, recorded=recorded))
        claimed = await self.claim(worker_id, models, max_jobs) if max_jobs > 0 else []
        return ReportedAndClaimed(answers, claimed)

    # -- operations ----------------------------------------------------------

    async def recover(self) -> list[JobEvent]:
        self._check_open("recover")
        now = self._clock()
        self._captured = []
        try:
            self._recover_run_timeouts(now)
            self._recover_leases(now)
            promoted = self._recover_retries(now)
            self._recover_queue_timeouts(now)
            self._recover_expiries(now)
            events = self._captured
        finally:
            self._captured = None
        if events or promoted:
            self._wake()
        return events

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        self._check_open("acquire_leadership")
        now = self._clock()
        if self._leader is not None and self._leader[0] != holder and self._leader[1] > now:
            return False
        self._leader = (holder, now + ttl.total_seconds())
        return True

    async def events(
        self,
        after: str = "0",
        count: int = 100,
        block: timedelta | None = None,
    ) -> list[JobEvent]:
        self._check_open("events")
        start = _event_number(after)
        deadline = time.monotonic() + (block.total_seconds() if block else 0.0)
        while True:
            changed = self._changed
            found = self._events_after(start, count)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0 or self._closed:
                return found
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return []

    async def newest_event_id(self) -> str:
        self._check_open("newest_event_id")
        return self._events[-1].id if self._events else "0"

    async def queue_depths(self) -> dict[tuple[str, Priority], int]:
        self._check_open("queue_depths")
        return {key: len(queue) for key, queue in self._queues.items()}

    async def in_flight(self) -> dict[str, int]:
        self._check_open("in_flight")
        return dict(self._in_flight)

    # -- submit --------------------------------------------------------------

    def _keyed(self, tenant: str, key: str, now: float) -> _Record | None:
        job_id = self._keys.get((tenant, key))
        if job_id is None:
            return None
        record = self._fresh(job_id, now)
        if record is None:
            self._keys.pop((tenant, key), None)
        return record

    def _plan_batch(
        self, requests: Sequence[SubmitRequest], now: float
    ) -> list[tuple[str, _Record | int | None]]:
        """Submit's checks for every item, in order, changing nothing.

        Each item gets its fingerprint and where its answer comes from: an
        existing job, the index of an earlier item that creates it, or None
        (create it). Admission counts the jobs of the earlier items. A
        refusal is raised as its item's error.
        """
        taken: dict[tuple[str, str], tuple[str, int]] = {}  # key -> (fingerprint, item)
        added: dict[str, int] = {}
        plan: list[tuple[str, _Record | int | None]] = []
        for index, request in enumerate(requests):
            try:
                plan.append(self._plan_item(request, index, now, taken, added))
            except StoreError as error:
                raise error.for_item(index) from None
        return plan

    def _plan_item(
        self,
        request: SubmitRequest,
        index: int,
        now: float,
        taken: dict[tuple[str, str], tuple[str, int]],
        added: dict[str, int],
    ) -> tuple[str, _Record | int | None]:
        key = request.idempotency_key
        fingerprint = request.fingerprint() if key else ""
        if key:
            earlier = taken.get((request.tenant, key))
            if earlier is not None:
                if earlier[0] != fingerprint:
                    raise IdempotencyKeyReused(
                        f"idempotency key {key!r} was used for a different request "
                        f"(requests[{earlier[1]}])"
                    )
                return fingerprint, earlier[1]
            existing = self._keyed(request.tenant, key, now)
            if existing is not None:
                if existing.fingerprint != fingerprint:
                    raise IdempotencyKeyReused(
                        f"idempotency key {key!r} was used for a different request",
                        job_id=existing.id,
                    )
                return fingerprint, existing
        count = self._admit(request, added.get(request.tenant, 0), sum(added.values()))
        added[request.tenant] = added.get(request.tenant, 0) + count
        if key:
            taken[(request.tenant, key)] = (fingerprint, index)
        return fingerprint, None

    def _create(self, request: SubmitRequest, fingerprint: str, now: float) -> _Record:
        """Create an admitted request's job or group and take its idempotency key."""
        if isinstance(request.work, GroupSpec):
            record = self._create_group(request, request.work, fingerprint, now)
        else:
            record = self._create_single(request, request.work, fingerprint, now)
        if request.idempotency_key:
            self._keys[(request.tenant, request.idempotency_key)] = record.id
        return record

    def _admit(self, request: SubmitRequest, tenant_added: int = 0, total_added: int = 0) -> int:
        """Refuse a request over a cap, counting jobs a batch adds before it; its job count."""
        if isinstance(request.work, GroupSpec):
            count = len(request.work.children)
            if count == 0:
                raise InvalidRequest("group.children", "a group needs at least one child")
            if count > self.settings.max_group_children:
                raise InvalidRequest(
                    "group.children",
                    f"{count} children is over the cap of {self.settings.max_group_children}",
                )
        else:
            count = 1
        live = self._live_by_tenant.get(request.tenant, 0) + tenant_added
        if live + count > self.settings.max_live_per_tenant:
            raise QuotaExceeded(
                f"tenant {request.tenant!r} has too many live jobs", tenant=request.tenant
            )
        if self._live_total + total_added + count > self.settings.max_live_total:
            raise QueueFull("too many live jobs")
        return count

    def _new_record(
        self,
        request: SubmitRequest,
        spec: JobSpec,
        now: float,
        parent: _Record | None = None,
        index: int = 0,
    ) -> _Record:
        """A single job (QUEUED) or a group's child (HELD), counted as live."""
        key = request.idempotency_key
        if parent is not None:
            key = policy.child_key(key, index)
        effective = policy.limits(spec, self.settings)
        record = _Record(
            id=str(ULID()),
            tenant=request.tenant,
            kind=JobKind.SINGLE if parent is None else JobKind.CHILD,
            status=JobStatus.QUEUED if parent is None else JobStatus.HELD,
            priority=request.priority,
            model=spec.model,
            create_time=now,
            update_time=now,
            payload=spec.payload,
            content_type=spec.content_type,
            labels=dict(spec.labels),
            max_attempts=effective.max_attempts,
            queue_timeout=effective.queue_timeout.total_seconds(),
            run_timeout=effective.run_timeout.total_seconds(),
            idempotency_key=key,
            parent_id=parent.id if parent else "",
            child_index=index,
        )
        self._jobs[record.id] = record
        self._live_by_tenant[record.tenant] = self._live_by_tenant.get(record.tenant, 0) + 1
        self._live_total += 1
        self._emit(record, None, now)
        return record

    def _create_single(
        self, request: SubmitRequest, spec: JobSpec, fingerprint: str, now: float
    ) -> _Record:
        record = self._new_record(request, spec, now)
        record.fingerprint = fingerprint
        self._enqueue(record, now)
        return record

    def _create_group(
        self, request: SubmitRequest, group: GroupSpec, fingerprint: str, now: float
    ) -> _Record:
        key = request.idempotency_key
        parent = _Record(
            id=str(ULID()),
            tenant=request.tenant,
            kind=JobKind.GROUP,
            status=JobStatus.QUEUED,
            priority=request.priority,
            model=group.children[0].model,
            create_time=now,
            update_time=now,
            fingerprint=fingerprint,
            idempotency_key=key,
            max_parallel=max(0, group.max_parallel),
        )
        self._jobs[parent.id] = parent
        self._emit(parent, None, now)
        for index, spec in enumerate(group.children):
            child = self._new_record(request, spec, now, parent, index)
            parent.children.append(child.id)
        self._release_held(parent, now)
        return parent

    # -- claim ---------------------------------------------------------------

    def _claim_now(self, worker_id: str, models: list[str], max_jobs: int) -> list[ClaimedJob]:
        now = self._clock()
        claimed: list[ClaimedJob] = []
        while len(claimed) < max_jobs:
            record = self._next_ready(models)
            if record is None:
                break
            claimed.append(self._lease(record, worker_id, now))
        if claimed:
            self._wake()
        return claimed

    def _next_ready(self, models: Iterable[str]) -> _Record | None:
        for priority in PRIORITIES_IN_CLAIM_ORDER:
            best: _Record | None = None
            for model in models:
                queue = self._queues.get((model, priority))
                head = queue.first() if queue else None
                if head is None:
                    continue
                record = self._jobs[head]
                if best is None or record.seq < best.seq:
                    best = record
            if best is not None:
                return best
        return None

    def _lease(self, record: _Record, worker_id: str, now: float) -> ClaimedJob:
        self._queue_of(record).take(record.id)
        record.attempts += 1
        record.worker_id = worker_id
        record.lease_id = uuid.uuid4().hex
        record.outcome = None
        record.cancel_requested = False
        record.start_time = now
        record.lease_deadline = now + self.settings.lease_timeout.total_seconds()
        self._push(self._leases, record.lease_deadline, record, record.lease_id)
        # A zero run_timeout means none (as RedisStore), not "already past".
        if record.run_timeout > 0:
            record.run_deadline = now + record.run_timeout
            self._push(self._runs, record.run_deadline, record, record.lease_id)
        self._transition(record, JobStatus.PROCESSING, now)
        if record.parent_id:
            parent = self._jobs[record.parent_id]
            if parent.status is JobStatus.QUEUED:
                parent.start_time = now
                self._transition(parent, JobStatus.PROCESSING, now)
        return ClaimedJob(
            job=self._snapshot(record),
            payload=record.payload,
            lease_id=record.lease_id,
            lease_expire_time=_dt(record.lease_deadline),
        )

    def _leased(self, job_id: str, lease_id: str) -> _Record:
        """The job if `lease_id` is its latest lease (live or just ended), else LeaseLost.

        An id with no record at all is JobNotFound, as on the tenant side.
        """
        record = self._fresh(job_id, self._clock())
        if record is None:
            raise JobNotFound(f"job {job_id} not found", job_id=job_id)
        if not lease_id or record.lease_id != lease_id:
            raise LeaseLost(f"lease {lease_id} is not the lease of job {job_id}", job_id=job_id)
        return record

    # -- transitions ---------------------------------------------------------

    def _transition(self, record: _Record, to: JobStatus, now: float) -> None:
        before = record.status
        if to not in TRANSITIONS[before]:
            raise RuntimeError(f"job {record.id}: illegal transition {before} -> {to}")
        record.status = to
        record.update_time = now
        if record.kind is not JobKind.GROUP:
            if before is JobStatus.PROCESSING:
                self._in_flight[record.model] -= 1
            if to is JobStatus.PROCESSING:
                self._in_flight[record.model] = self._in_flight.get(record.model, 0) + 1
        self._emit(record, before, now)

    def _emit(self, record: _Record, before: JobStatus | None, now: float) -> None:
        event = JobEvent(
            id=str(self._next_event),
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
            time=_dt(now),
        )
        self._next_event += 1
        self._events.append(event)
        if self._captured is not None:
            self._captured.append(event)
        cap = max(1, self.settings.events_max_length)
        if len(self._events) > cap + max(1, cap // 10):
            del self._events[: len(self._events) - cap]
            self._first_event = int(self._events[0].id)

    def _enqueue(self, record: _Record, now: float) -> None:
        """First QUEUED: the job gets the next place in its queue."""
        self._seq += 1
        record.seq = self._seq
        self._queue_of(record).append(record.id)
        self._claimable_models.add(record.model)
        self._start_queue_clock(record, now)

    def _start_queue_clock(self, record: _Record, now: float) -> None:
        # A zero queue_timeout means none (as RedisStore), not "already past".
        if record.queue_timeout > 0:
            record.queue_deadline = now + record.queue_timeout
            self._push(self._queue_waits, record.queue_deadline, record)

    def _queue_of(self, record: _Record) -> _OrderedQueue:
        key = (record.model, record.priority)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _OrderedQueue()
        return queue

    def _end(self, record: _Record, to: JobStatus, now: float) -> None:
        """A single job or a child reaches a terminal status."""
        was_active = record.status in (JobStatus.QUEUED, JobStatus.PROCESSING)
        self._transition(record, to, now)
        record.end_time = now
        record.ready_at = 0.0
        self._queue_of(record).forget(record.id)
        self._live_by_tenant[record.tenant] -= 1
        self._live_total -= 1
        if record.parent_id:
            self._child_ended(record, was_active, now)
        else:
            self._set_expiry(record, now)

    def _retry_or_exhaust(
        self, record: _Record, error_code: str, error_message: str, now: float, *, backoff: bool
    ) -> None:
        """End an attempt that may be retried: requeue it, or fail it past max_attempts."""
        parent = self._jobs.get(record.parent_id)
        if parent is not None and parent.status is JobStatus.CANCELLED:
            # a running child may finish its attempt after its group was
            # cancelled, but a retry would queue work for a cancelled group
            record.error_code = ERROR_CANCELLED
            record.error_message = policy.GROUP_CANCELLED_MESSAGE
            self._end(record, JobStatus.CANCELLED, now)
            return
        if record.attempts >= record.max_attempts:
            record.error_code = ERROR_ATTEMPTS_EXHAUSTED
            record.error_message = policy.exhausted_message(error_code, error_message)
            self._end(record, JobStatus.FAILED, now)
            return
        record.error_code, record.error_message = error_code, error_message
        self._transition(record, JobStatus.QUEUED, now)
        self._start_queue_clock(record, now)
        if backoff:
            record.ready_at = (
                now + policy.retry_delay(record.attempts, self.settings).total_seconds()
            )
            self._push(self._retries, record.ready_at, record)
        else:
            self._queue_of(record).restore(record.id)
            self._claimable_models.add(record.model)

    def _release(self, record: _Record, now: float) -> None:
        """PROCESSING -> QUEUED as if the claim never happened (release.lua's twin)."""
        record.attempts -= 1
        record.lease_id = ""  # a late heartbeat or set_result with it is LEASE_LOST
        parent = self._jobs.get(record.parent_id)
        if parent is not None and parent.status is JobStatus.CANCELLED:
            record.error_code, record.error_message = ERROR_CANCELLED, "its group was cancelled"
            self._end(record, JobStatus.CANCELLED, now)
            return
        self._transition(record, JobStatus.QUEUED, now)
        self._start_queue_clock(record, now)
        self._queue_of(record).restore(record.id)
        self._claimable_pending = True

    def _cancel_job(self, record: _Record, reason: str, now: float) -> None:
        record.cancel_requested = record.status is JobStatus.PROCESSING
        record.error_code, record.error_message = ERROR_CANCELLED, reason
        self._end(record, JobStatus.CANCELLED, now)

    def _cancel_group(self, parent: _Record, reason: str, now: float) -> None:
        parent.cancel_requested = parent.status is JobStatus.PROCESSING
        parent.error_code, parent.error_message = ERROR_CANCELLED, reason
        self._transition(parent, JobStatus.CANCELLED, now)
        parent.end_time = now
        for child_id in parent.children:
            child = self._jobs[child_id]
            if child.status in (JobStatus.HELD, JobStatus.QUEUED):
                self._cancel_job(child, reason, now)
        self._maybe_expire_group(parent, now)

    # -- groups --------------------------------------------------------------

    def _release_held(self, parent: _Record, now: float) -> None:
        """Queue held children, lowest index first, while max_parallel allows."""
        while parent.next_held < len(parent.children) and (
            parent.max_parallel == 0 or parent.active_children < parent.max_parallel
        ):
            child = self._jobs[parent.children[parent.next_held]]
            parent.next_held += 1
            if child.status is not JobStatus.HELD:
                continue
            self._transition(child, JobStatus.QUEUED, now)
            parent.active_children += 1
            self._enqueue(child, now)

    def _child_ended(self, child: _Record, was_active: bool, now: float) -> None:
        parent = self._jobs[child.parent_id]
        parent.ended_children += 1
        if child.status is JobStatus.COMPLETED:
            parent.completed_children += 1
        if was_active:
            parent.active_children -= 1
        if parent.status in TERMINAL_STATUSES:
            self._maybe_expire_group(parent, now)
            return
        total = len(parent.children)
        parent.progress = parent.ended_children / total
        parent.update_time = now
        self._release_held(parent, now)
        if parent.ended_children == total:
            self._finish_group(parent, now)

    def _finish_group(self, parent: _Record, now: float) -> None:
        final, parent.error_message = policy.group_outcome(
            len(parent.children), parent.completed_children
        )
        self._transition(parent, final, now)
        parent.end_time = now
        self._maybe_expire_group(parent, now)

    def _maybe_expire_group(self, parent: _Record, now: float) -> None:
        """Once the parent and every child are terminal, they all expire together."""
        if parent.ended_children == len(parent.children) and parent.expire_at is None:
            self._set_expiry(parent, now)

    def _set_expiry(self, record: _Record, now: float) -> None:
        record.expire_at = now + self.settings.result_ttl.total_seconds()
        for child_id in record.children:
            self._jobs[child_id].expire_at = record.expire_at
        self._expiries.push(record.expire_at, record.id)

    # -- recovery ------------------------------------------------------------

    def _push(
        self, deadlines: _Deadlines, deadline: float, record: _Record, token: str = ""
    ) -> None:
        deadlines.push(deadline, record.id, token)
        deadlines.sweep(self._jobs, self._live_total)

    def _recover_run_timeouts(self, now: float) -> None:
        for record in self._runs.due(now, self._jobs):
            message = policy.RUN_TIMEOUT_MESSAGE.format(attempts=record.attempts)
            self._retry_or_exhaust(record, ERROR_RUN_TIMEOUT, message, now, backoff=True)

    def _recover_leases(self, now: float) -> None:
        for record in self._leases.due(now, self._jobs):
            message = policy.LEASE_EXPIRED_MESSAGE.format(attempts=record.attempts)
            self._retry_or_exhaust(record, ERROR_LEASE_EXPIRED, message, now, backoff=False)

    def _recover_retries(self, now: float) -> bool:
        promoted = False
        for record in self._retries.due(now, self._jobs):
            record.ready_at = 0.0
            self._queue_of(record).restore(record.id)
            self._claimable_models.add(record.model)
            promoted = True
        return promoted

    def _recover_queue_timeouts(self, now: float) -> None:
        for record in self._queue_waits.due(now, self._jobs):
            record.error_code = ERROR_QUEUE_TIMEOUT
            record.error_message = policy.QUEUE_TIMEOUT_MESSAGE
            self._end(record, JobStatus.FAILED, now)

    def _recover_expiries(self, now: float) -> None:
        for record in self._expiries.due(now, self._jobs):
            self._fresh(record.id, now)

    # -- reads ---------------------------------------------------------------

    def _fresh(self, job_id: str, now: float) -> _Record | None:
        """The record, unless its result_ttl ran out (then it is dropped)."""
        record = self._jobs.get(job_id)
        if record is not None and record.expire_at is not None and record.expire_at <= now:
            self._purge(record)
            return None
        return record

    def _purge(self, record: _Record) -> None:
        if record.parent_id and record.parent_id in self._jobs:
            record = self._jobs[record.parent_id]
        for job_id in [*record.children, record.id]:
            gone = self._jobs.pop(job_id, None)
            if gone and gone.idempotency_key and not gone.parent_id:
                key = (gone.tenant, gone.idempotency_key)
                if self._keys.get(key) == job_id:
                    del self._keys[key]

    def _visible_record(self, tenant: str, job_id: str) -> _Record:
        record = self._fresh(job_id, self._clock())
        if record is None or record.tenant != tenant:
            raise JobNotFound(f"job {job_id} not found", job_id=job_id)
        return record

    def _position(self, record: _Record) -> int | None:
        if record.status is not JobStatus.QUEUED or record.kind is JobKind.GROUP:
            return None
        queue = self._queues.get((record.model, record.priority))
        if queue is None or record.id not in queue:
            return None
        ahead = queue.rank(record.id)
        for priority in PRIORITIES_IN_CLAIM_ORDER:
            if priority >= record.priority:
                break
            higher = self._queues.get((record.model, priority))
            ahead += len(higher) if higher else 0
        return ahead

    def _snapshot(self, record: _Record) -> Job:
        children: tuple[ChildSummary, ...] = ()
        if record.kind is JobKind.GROUP:
            children = tuple(
                ChildSummary(
                    id=child.id,
                    child_index=child.child_index,
                    status=child.status,
                    error_code=child.error_code,
                )
                for child in (self._jobs[child_id] for child_id in record.children)
            )
        return Job(
            id=record.id,
            tenant=record.tenant,
            kind=record.kind,
            status=record.status,
            priority=record.priority,
            model=record.model,
            create_time=_dt(record.create_time),
            update_time=_dt(record.update_time),
            content_type=record.content_type,
            labels=dict(record.labels),
            idempotency_key=record.idempotency_key,
            attempts=record.attempts,
            max_attempts=record.max_attempts,
            start_time=_optional_dt(record.start_time),
            end_time=_optional_dt(record.end_time),
            queue_position=self._position(record),
            progress=record.progress,
            stage=record.stage,
            result=record.result,
            result_content_type=record.result_content_type,
            error_code=record.error_code,
            error_message=record.error_message,
            parent_id=record.parent_id,
            child_index=record.child_index,
            max_parallel=record.max_parallel,
            children=children,
            worker_id=record.worker_id,
            cancel_requested=record.cancel_requested,
            queue_timeout=timedelta(seconds=record.queue_timeout),
            run_timeout=timedelta(seconds=record.run_timeout),
        )

    def _events_after(self, start: int, count: int) -> list[JobEvent]:
        index = max(0, start + 1 - self._first_event)
        return self._events[index : index + max(0, count)]

    # -- plumbing ------------------------------------------------------------

    def _check_open(self, operation: str) -> None:
        """Every public method starts here, naming its operation.

        A closed store is the one failure LocalStore has; it is reported to
        `on_failure` (store error metrics) before it is raised.
        """
        with reporting(self.on_failure, operation):
            self._refuse_if_closed(operation)

    def _refuse_if_closed(self, operation: str) -> None:
        if self._closed:
            raise StoreUnavailable(f"{operation}: the store is closed")

    def _wake(self, *job_ids: str) -> None:
        """Wake event readers, and the waiters of what changed since the last wake-up."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self._closed or self._woken_through < self._first_event:
            self._waiters.wake_all()  # closing, or events trimmed before they woke anyone
        else:
            self._waiters.wake(self._changed_topics(job_ids))
        self._woken_through = self._next_event
        self._claimable_models.clear()

    def _changed_topics(self, job_ids: Iterable[str]) -> set[str]:
        topics = {f"j {job_id}" for job_id in job_ids}
        for event in self._events[self._woken_through - self._first_event :]:
            topics.add(f"j {event.job_id}")
            if event.parent_job_id:
                topics.add(f"j {event.parent_job_id}")  # its progress and children moved
            topics.add(f"q {event.model}")
        for model in self._claimable_models:
            topics.update((f"r {model}", f"q {model}"))
        return topics


async def _settled(own: asyncio.Event, moved: asyncio.Event) -> None:
    """Return at once on an own change; after a queue move, within POSITION_SETTLE.

    A queue that moves many times a second (a burst of claims or cancels)
    then costs each watcher of it one re-read per POSITION_SETTLE, not one per move.
    """
    own_wait = asyncio.ensure_future(own.wait())
    moved_wait = asyncio.ensure_future(moved.wait())
    try:
        await asyncio.wait({own_wait, moved_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not own.is_set():
            await asyncio.wait({own_wait}, timeout=policy.POSITION_SETTLE)
    finally:
        own_wait.cancel()
        moved_wait.cancel()
