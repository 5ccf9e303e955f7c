"""LocalEngine: the embedded store's transitions in memory (`jobgate serve` without Redis).

Atomicity: every transition is plain synchronous code with no `await`
inside, so on the one event loop that owns the store each transition runs
whole; waiters (claim long-polls, watches, events) sleep on listeners that
transitions wake (store/memory/waiters.py), routed like RedisEngine's
messages: a change wakes the watchers of the jobs it touched (and of jobs
queued for the same model, whose positions move) and the claims of the
models that got a claimable job, never every waiter. The state and the
steps transitions are made of live in store/memory/state.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta

from ulid import ULID

from store import fields, policy
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
)
from store.memory.operators import Operators
from store.memory.record import Outcome, Record
from store.memory.state import State, dt, event_number
from store.memory.waiters import LocalListener, Waiters
from store.model import (
    TERMINAL_STATUSES,
    CancelResult,
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
from store.policy import Verdict

# In-process wake-ups are never lost: a wait needs no safety re-check.
_NO_RECHECK = 3600.0


class LocalEngine(Operators):
    """The Store's transitions in process memory. Not durable: state dies with the process."""

    def __init__(self, settings: StoreSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.on_failure: FailureHook = ignore_failure
        self.state = State(settings, clock)
        self._closed = False
        self._leader: tuple[str, float] | None = None
        # Replaced on every wake-up: event readers hold the old one, which gets set.
        self._changed = asyncio.Event()
        self._waiters = Waiters()
        self._woken_through = 1  # events numbered below this have woken their waiters
        # no connection pool to spare: woken re-reads need no slot
        self.waiter_reads: contextlib.AbstractAsyncContextManager[object] = _NoSlot()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        self._wake()

    async def ping(self) -> None:
        self._check_open()

    # -- tenant-facing -------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> SubmitResult:
        self._check_open()
        now = self.state.clock()
        key = request.idempotency_key
        # Only a keyed request is ever compared, so only it pays for the digest.
        fingerprint = request.fingerprint() if key else ""
        if key:
            existing = self.state.keyed(request.tenant, key, now)
            if existing is not None:
                if existing.fingerprint != fingerprint:
                    raise IdempotencyKeyReused(
                        f"idempotency key {key!r} was used for a different request",
                        job_id=existing.id,
                    )
                return SubmitResult(self.state.snapshot(existing), reused=True)
        self._admit(request)
        record = self._create(request, fingerprint, now)
        self._wake()
        return SubmitResult(self.state.snapshot(record), reused=False)

    async def submit_batch(self, requests: Sequence[SubmitRequest]) -> list[SubmitResult]:
        self._check_open()
        now = self.state.clock()
        plan = self._plan_batch(requests, now)  # every check first: all or nothing
        records: list[Record] = []
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
            SubmitResult(self.state.snapshot(record), reused=source is not None)
            for record, (_, source) in zip(records, plan, strict=True)
        ]

    async def get(self, tenant: str | None, job_id: str, operation: str = "get") -> Job:
        self._check_open()
        return self.state.snapshot(self.state.visible_record(tenant, job_id))

    async def payload(self, tenant: str | None, job_id: str) -> bytes:
        self._check_open()
        return self.state.visible_record(tenant, job_id).payload

    async def list_children(self, tenant: str | None, job_id: str) -> list[Job]:
        self._check_open()
        record = self.state.visible_record(tenant, job_id)
        return [self.state.snapshot(self.state.jobs[child]) for child in record.children]

    async def cancel(
        self, tenant: str | None, job_id: str, reason: str = "", actor: str = ""
    ) -> CancelResult:
        self._check_open()
        now = self.state.clock()
        record = self.state.visible_record(tenant, job_id)
        if record.status in TERMINAL_STATUSES:
            return CancelResult(self.state.snapshot(record), cancelled=False)
        with self.state.acting(actor):
            if record.kind is JobKind.GROUP:
                self.state.cancel_group(record, reason, now)
            else:
                self.state.cancel_job(record, reason, now)
        self._wake()
        return CancelResult(self.state.snapshot(record), cancelled=True)

    # -- worker-facing -------------------------------------------------------

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` (tests, debugging), as RedisStore's."""
        return self._waiters.count(f"r {model}")

    async def release(self, leases: Sequence[ClaimedJob]) -> int:
        self._check_open()
        now = self.state.clock()
        released = 0
        for item in leases:
            record = self.state.fresh(item.job.id, now)
            if record is None or record.status is not JobStatus.PROCESSING:
                continue
            if record.lease_id != item.lease_id:
                continue
            self.state.release(record, now)
            released += 1
        if released:
            self._wake()
        return released

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult:
        self._check_open()
        now = self.state.clock()
        record = self.state.record_of(job_id)
        verdict = policy.heartbeat_verdict(
            record.status, bool(lease_id) and record.lease_id == lease_id, record.cancel_requested
        )
        if verdict is Verdict.CANCEL_REQUESTED:
            return HeartbeatResult(dt(record.lease_deadline), cancel_requested=True)
        if verdict is not Verdict.APPLY:
            raise LeaseLost(
                f"lease {lease_id} is not the live lease of job {job_id}", job_id=job_id
            )
        record.lease_deadline = now + self.settings.lease_timeout.total_seconds()
        self.state.push(self.state.leases, record.lease_deadline, record, lease_id)
        stage = stage or record.stage
        if (progress, stage) != (record.progress, record.stage):
            record.progress, record.stage = progress, stage
            record.update_time = now
            self._wake(record.id)  # progress changes are not events
        return HeartbeatResult(dt(record.lease_deadline), cancel_requested=False)

    async def record_result(
        self, job_id: str, lease_id: str, report: ResultReport
    ) -> ResultRecorded:
        self._check_open()
        now = self.state.clock()
        record = self.state.record_of(job_id)
        outcome: Outcome = (report.status, report.retryable, report.error_code, report.result)
        verdict = policy.result_verdict(
            record.status,
            bool(lease_id) and record.lease_id == lease_id,
            record.cancel_requested,
            record.outcome == outcome,
        )
        if verdict is Verdict.JOB_CANCELLED:
            raise JobCancelled(f"job {job_id} was cancelled", job_id=job_id)
        if verdict is Verdict.REPEAT:
            return ResultRecorded(self.state.snapshot(record), applied=False)
        if verdict is Verdict.LEASE_LOST:
            raise LeaseLost(
                f"lease {lease_id} is not the live lease of job {job_id}", job_id=job_id
            )
        record.outcome = outcome
        if report.status is JobStatus.COMPLETED:
            record.result = report.result
            record.result_content_type = report.result_content_type
            record.error_code = record.error_message = ""
            record.progress = 1.0
            self.state.end(record, JobStatus.COMPLETED, now)
        elif report.retryable:
            code, message = report.error_code, report.error_message
            self.state.retry_or_exhaust(record, code, message, now, backoff=True)
        else:
            record.error_code, record.error_message = report.error_code, report.error_message
            self.state.end(record, JobStatus.FAILED, now)
        self._wake()
        return ResultRecorded(self.state.snapshot(record), applied=True)

    async def report_and_claim(
        self,
        worker_id: str,
        models: list[str],
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
        claimed = self._claim(worker_id, models, max_jobs) if max_jobs > 0 else []
        return ReportedAndClaimed(answers, claimed)

    # -- operations ----------------------------------------------------------

    async def recover(self) -> list[JobEvent]:
        self._check_open()
        now = self.state.clock()
        self.state.captured = []
        try:
            self.state.recover_run_timeouts(now)
            self.state.recover_leases(now)
            promoted = self.state.recover_retries(now)
            self.state.recover_queue_timeouts(now)
            self.state.recover_expiries(now)
            events = self.state.captured
        finally:
            self.state.captured = None
        if events or promoted:
            self._wake()
        return events

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        self._check_open()
        now = self.state.clock()
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
        self._check_open()
        start = event_number(after)
        deadline = time.monotonic() + (block.total_seconds() if block else 0.0)
        while True:
            changed = self._changed
            found = self.state.events_after(start, count)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0 or self._closed:
                return found
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return []

    async def newest_event_id(self) -> str:
        self._check_open()
        return self.state.events[-1].id if self.state.events else "0"

    async def queue_depths(self) -> dict[tuple[str, Priority], int]:
        self._check_open()
        return {key: len(queue) for key, queue in self.state.queues.items()}

    async def in_flight(self) -> dict[str, int]:
        self._check_open()
        return dict(self.state.in_flight)

    # -- submit --------------------------------------------------------------

    def _plan_batch(
        self, requests: Sequence[SubmitRequest], now: float
    ) -> list[tuple[str, Record | int | None]]:
        """Submit's checks for every item, in order, changing nothing.

        Each item gets its fingerprint and where its answer comes from: an
        existing job, the index of an earlier item that creates it, or None
        (create it). Admission counts the jobs of the earlier items. A
        refusal is raised as its item's error.
        """
        taken: dict[tuple[str, str], tuple[str, int]] = {}  # key -> (fingerprint, item)
        added: dict[str, int] = {}
        plan: list[tuple[str, Record | int | None]] = []
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
    ) -> tuple[str, Record | int | None]:
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
            existing = self.state.keyed(request.tenant, key, now)
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

    def _create(self, request: SubmitRequest, fingerprint: str, now: float) -> Record:
        """Create an admitted request's job or group and take its idempotency key."""
        if isinstance(request.work, GroupSpec):
            record = self._create_group(request, request.work, fingerprint, now)
        else:
            record = self._create_single(request, request.work, fingerprint, now)
        if request.idempotency_key:
            self.state.keys[(request.tenant, request.idempotency_key)] = record.id
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
        live = self.state.live_by_tenant.get(request.tenant, 0) + tenant_added
        if live + count > self.settings.max_live_per_tenant:
            raise QuotaExceeded(
                f"tenant {request.tenant!r} has too many live jobs", tenant=request.tenant
            )
        if self.state.live_total + total_added + count > self.settings.max_live_total:
            raise QueueFull("too many live jobs")
        return count

    def _new_record(
        self,
        request: SubmitRequest,
        spec: JobSpec,
        now: float,
        parent: Record | None = None,
        index: int = 0,
    ) -> Record:
        """A single job (QUEUED) or a group's child (HELD), counted as live."""
        key = request.idempotency_key
        if parent is not None:
            key = policy.child_key(key, index)
        effective = policy.limits(spec, self.settings)
        record = Record(
            id=str(ULID()),
            tenant=request.tenant,
            kind=JobKind.SINGLE if parent is None else JobKind.CHILD,
            status=JobStatus.QUEUED if parent is None else JobStatus.HELD,
            priority=request.priority,
            model=spec.model,
            create_time=now,
            update_time=now,
            payload=spec.payload,
            max_attempts=effective.max_attempts,
            queue_timeout=effective.queue_timeout.total_seconds(),
            run_timeout=effective.run_timeout.total_seconds(),
            idempotency_key=key,
            parent_id=parent.id if parent else "",
            child_index=index,
        )
        for name, value in fields.copied(spec).items():
            setattr(record, name, dict(value) if isinstance(value, Mapping) else value)
        self.state.jobs[record.id] = record
        self.state.live_by_tenant[record.tenant] = (
            self.state.live_by_tenant.get(record.tenant, 0) + 1
        )
        self.state.live_total += 1
        self.state.emit(record, None, now)
        return record

    def _create_single(
        self, request: SubmitRequest, spec: JobSpec, fingerprint: str, now: float
    ) -> Record:
        record = self._new_record(request, spec, now)
        record.fingerprint = fingerprint
        self.state.enqueue(record, now)
        return record

    def _create_group(
        self, request: SubmitRequest, group: GroupSpec, fingerprint: str, now: float
    ) -> Record:
        key = request.idempotency_key
        parent = Record(
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
        self.state.jobs[parent.id] = parent
        self.state.emit(parent, None, now)
        for index, spec in enumerate(group.children):
            child = self._new_record(request, spec, now, parent, index)
            parent.children.append(child.id)
        self.state.release_held(parent, now)
        return parent

    # -- claim ---------------------------------------------------------------

    async def claim_now(self, worker_id: str, models: list[str], max_jobs: int) -> list[ClaimedJob]:
        self._check_open()
        return self._claim(worker_id, models, max_jobs)

    def _claim(self, worker_id: str, models: list[str], max_jobs: int) -> list[ClaimedJob]:
        now = self.state.clock()
        claimed: list[ClaimedJob] = []
        while len(claimed) < max_jobs:
            record = self.state.next_ready(models)
            if record is None:
                break
            claimed.append(self.state.lease(record, worker_id, now))
        if claimed:
            self._wake()
        return claimed

    async def read_for_watch(self, tenant: str | None, job_id: str) -> Job:
        return await self.get(tenant, job_id, "watch")

    # -- waiting -------------------------------------------------------------

    @contextlib.contextmanager
    def listen(self, topics: Iterable[str], wake_one: bool = False) -> Iterator[LocalListener]:
        self._check_open()
        with self._waiters.listen(topics) as listener:
            yield listener

    def recheck(self) -> float:
        return _NO_RECHECK

    def settle_time(self, model: str) -> float:
        return policy.POSITION_SETTLE

    # -- plumbing ------------------------------------------------------------

    def _check_open(self) -> None:
        """A closed store is the one failure LocalEngine has."""
        if self._closed:
            raise StoreUnavailable("the store is closed")

    def _wake(self, *job_ids: str) -> None:
        """Wake event readers, and the waiters of what changed since the last wake-up."""
        state = self.state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self._closed or self._woken_through < state.first_event:
            self._waiters.wake_all()  # closing, or events trimmed before they woke anyone
        else:
            self._waiters.wake(self._changed_topics(job_ids))
        self._woken_through = state.next_event
        state.claimable_models.clear()

    def _changed_topics(self, job_ids: Iterable[str]) -> set[str]:
        state = self.state
        topics = {f"j {job_id}" for job_id in job_ids}
        for event in state.events[self._woken_through - state.first_event :]:
            topics.add(f"j {event.job_id}")
            if event.parent_job_id:
                topics.add(f"j {event.parent_job_id}")  # its progress and children moved
            topics.add(f"q {event.model}")
        for model in state.claimable_models:
            topics.update((f"r {model}", f"q {model}"))
        return topics


class _NoSlot(contextlib.AbstractAsyncContextManager[object]):
    async def __aexit__(self, *exc: object) -> None:
        return None
