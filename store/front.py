"""The thin Store front: each public method normalises its input, reports a failure
once, and calls the engine; waiting (a claim's long poll, a watch) is written here once.

An `Engine` is a backend's transitions and reads (LocalEngine in
store/memory/, RedisEngine in store/redis/): it takes input already
normalised (claim models deduplicated, the claim limit applied, progress
clamped) and never reports failures itself. `StoreFront` is the `Store`
the servers hold; `LocalStore` and `RedisStore` are it over their engine.

No answer leaves before what it saw is durable: every call ends with
`engine.settled()` (`_answering`), which returns at once on Redis and in
memory, and waits for the group commit on a durable embedded store. A claim
whose caller leaves during that wait gives its leases back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import timedelta
from typing import Protocol

from store.errors import FailureHook, InvalidRequest, ignore_failure, reporting
from store.model import (
    CancelResult,
    ClaimedJob,
    HeartbeatResult,
    Job,
    JobEvent,
    JobFilter,
    JobKind,
    JobPage,
    JobStatus,
    LeaseResult,
    ListCursor,
    Priority,
    QueueStats,
    ReportedAndClaimed,
    ResultRecorded,
    ResultReport,
    StoreSettings,
    SubmitRequest,
    SubmitResult,
    WorkerInfo,
    WorkerSighting,
)
from store.policy import claim_classes, claim_limit, claim_models, queue_class, watch_view
from store.poll import EVERY_CHANGE, Listener, long_poll
from store.protocol import Store


class Engine(Protocol):
    """A backend's transitions and reads, behind the front (see the module docstring)."""

    settings: StoreSettings
    #: Set by the front: background work (a release nobody awaits) reports here.
    on_failure: FailureHook

    @property
    def waiter_reads(self) -> contextlib.AbstractAsyncContextManager[object]:
        """Re-reads by woken waiters take one of these (Redis: connections of the pool)."""
        ...

    @property
    def closed(self) -> bool: ...

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> None: ...

    async def settled(self, soon: bool = False) -> None:
        """Return once every change made so far is durable (StoreUnavailable if it cannot be);
        `soon`: with the next commit another call starts, or within a few milliseconds."""
        ...

    async def submit(self, request: SubmitRequest) -> SubmitResult: ...
    async def submit_batch(self, requests: Sequence[SubmitRequest]) -> list[SubmitResult]: ...
    async def get(self, tenant: str | None, job_id: str, operation: str = "get") -> Job: ...
    async def read_for_watch(self, tenant: str | None, job_id: str) -> Job: ...
    async def payload(self, tenant: str | None, job_id: str) -> bytes: ...
    async def list_children(self, tenant: str | None, job_id: str) -> list[Job]: ...

    async def list_jobs(
        self, tenant: str | None, query: JobFilter, after: ListCursor | None, page_size: int
    ) -> JobPage: ...

    async def retry_job(self, tenant: str | None, job_id: str, actor: str = "") -> Job: ...

    def listen(
        self, topics: Iterable[str], wake_one: bool = False
    ) -> contextlib.AbstractContextManager[Listener]: ...

    def recheck(self) -> float:
        """How long a wait sleeps at most without a wake-up (a notification may be lost)."""
        ...

    def settle_time(self, model: str) -> float:
        """How long a watcher woken only by a queue move waits before it re-reads."""
        ...

    async def claim_now(
        self, worker_id: str, classes: list[str], max_jobs: int
    ) -> list[ClaimedJob]:
        """Claim up to max_jobs from the queue classes' queues now (no wait)."""
        ...

    async def release(self, leases: Sequence[ClaimedJob]) -> int: ...

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult: ...

    async def record_result(
        self, job_id: str, lease_id: str, report: ResultReport
    ) -> ResultRecorded: ...

    async def report_and_claim(
        self, worker_id: str, models: list[str], results: Sequence[LeaseResult], max_jobs: int
    ) -> ReportedAndClaimed: ...

    async def cancel(
        self, tenant: str | None, job_id: str, reason: str = "", actor: str = ""
    ) -> CancelResult: ...
    async def recover(self) -> list[JobEvent]: ...
    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool: ...

    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[JobEvent]: ...

    async def newest_event_id(self) -> str: ...
    async def ready_counts(self) -> dict[tuple[str, Priority, str], int]:
        """Claimable jobs per (model, priority, pool)."""
        ...

    async def in_flight(self) -> dict[str, int]: ...

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` (tests, debugging)."""
        ...

    # the fleet (store/memory/fleet.py, store/redis/fleet.py)
    async def record_workers(self, seen: Sequence[WorkerSighting]) -> None: ...
    async def list_workers(self) -> list[WorkerInfo]: ...
    async def queue_stats(self) -> list[QueueStats]: ...
    async def demand(self, model: str, pool: str | None) -> int: ...


class StoreFront(Store):
    """The Store over one engine (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._on_failure: FailureHook = ignore_failure
        self._giving_back: set[asyncio.Task[int]] = set()

    @property
    def settings(self) -> StoreSettings:  # type: ignore[override]
        return self.engine.settings

    @property
    def on_failure(self) -> FailureHook:
        return self._on_failure

    @on_failure.setter
    def on_failure(self, hook: FailureHook) -> None:
        self._on_failure = hook
        self.engine.on_failure = hook

    def _reporting(self, operation: str) -> reporting:
        return reporting(self._on_failure, operation)

    def _answering(self, operation: str) -> _Answering:
        """Report a failure once, and let the answer (or the error) leave only when settled."""
        return _Answering(self, operation)

    async def _settled_or_give_back(self, claimed: Sequence[ClaimedJob]) -> None:
        """Wait until the claim is durable; if the caller leaves meanwhile, release it."""
        try:
            await self.engine.settled()
        except asyncio.CancelledError:
            if claimed:
                task = asyncio.ensure_future(self.engine.release(claimed))
                self._giving_back.add(task)
                task.add_done_callback(self._giving_back.discard)
            raise

    # Lifecycle -----------------------------------------------------------------
    async def open(self) -> None:
        with self._reporting("open"):
            await self.engine.open()

    async def close(self) -> None:
        await self.engine.close()

    async def ping(self) -> None:
        async with self._answering("ping"):
            await self.engine.ping()

    # Tenant-facing ---------------------------------------------------------------
    async def submit(self, request: SubmitRequest) -> SubmitResult:
        async with self._answering("submit"):
            return await self.engine.submit(request)

    async def submit_batch(self, requests: Sequence[SubmitRequest]) -> list[SubmitResult]:
        if not requests:
            return []
        async with self._answering("submit_batch"):
            return await self.engine.submit_batch(requests)

    async def get(self, tenant: str | None, job_id: str) -> Job:
        async with self._answering("get"):
            return await self.engine.get(tenant, job_id)

    async def payload(self, tenant: str | None, job_id: str) -> bytes:
        async with self._answering("payload"):
            return await self.engine.payload(tenant, job_id)

    async def list_children(self, tenant: str | None, job_id: str) -> list[Job]:
        async with self._answering("list_children"):
            return await self.engine.list_children(tenant, job_id)

    async def list_jobs(
        self,
        tenant: str | None,
        query: JobFilter,
        after: ListCursor | None,
        page_size: int,
    ) -> JobPage:
        if page_size < 1:
            raise InvalidRequest("page_size", "must be at least 1")
        async with self._answering("list_jobs"):
            return await self.engine.list_jobs(tenant, query, after, page_size)

    async def retry_job(self, tenant: str | None, job_id: str, actor: str = "") -> Job:
        async with self._answering("retry_job"):
            return await self.engine.retry_job(tenant, job_id, actor)

    async def cancel(
        self, tenant: str | None, job_id: str, reason: str = "", actor: str = ""
    ) -> CancelResult:
        async with self._answering("cancel"):
            return await self.engine.cancel(tenant, job_id, reason, actor)

    async def watch(self, tenant: str | None, job_id: str) -> AsyncIterator[Job]:
        engine = self.engine
        with self._reporting("watch"), engine.listen([f"j {job_id}"]) as listener:
            job = await self._read_settled(tenant, job_id)
            seen: tuple[object, ...] | None = None
            while True:
                if job.status is JobStatus.QUEUED and job.kind is not JobKind.GROUP:
                    # positions move when the queue shrinks or a job is queued
                    # ahead; a move published between our read and now was
                    # not heard, so read again once the topics are new
                    # (a pool's job is also behind the any-pool queue's: its
                    # class's "r" and the model's)
                    new_q = listener.add(f"q {job.model}")
                    new_r = listener.add(f"r {job.model}")
                    new_class = listener.add(f"r {queue_class(job.model, job.pool)}")
                    if new_q or new_r or new_class:
                        listener.clear()
                        job = await self._read_settled(tenant, job_id)
                if watch_view(job) != seen:
                    seen = watch_view(job)
                    yield job
                if job.terminal or engine.closed:
                    return
                await listener.wait(engine.recheck())
                await listener.settle(engine.settle_time(job.model))
                if engine.closed:
                    return
                listener.clear()  # before the read: a change after it is kept
                job = await self._read_settled(tenant, job_id)

    async def _read_settled(self, tenant: str | None, job_id: str) -> Job:
        job = await self.engine.read_for_watch(tenant, job_id)
        await self.engine.settled()
        return job

    # Worker-facing ---------------------------------------------------------------
    async def claim(
        self,
        worker_id: str,
        models: Sequence[str],
        max_jobs: int = 1,
        wait: timedelta = timedelta(0),
        pool: str = "",
    ) -> list[ClaimedJob]:
        wanted = claim_classes(claim_models(models), pool)
        if not wanted:
            return []
        limit = claim_limit(max_jobs)
        engine = self.engine
        with self._reporting("claim"):
            claimed = await long_poll(
                engine.listen((f"r {job_class}" for job_class in wanted), wake_one=True),
                lambda: engine.claim_now(worker_id, wanted, limit),
                wait,
                closed=lambda: engine.closed,
                reads=engine.waiter_reads,
                recheck=engine.recheck,
            )
            await self._settled_or_give_back(claimed)
            return claimed

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` (tests, debugging)."""
        return self.engine.waiting_claims(model)

    async def release(self, leases: Sequence[ClaimedJob]) -> int:
        if not leases:
            return 0
        async with self._answering("release"):
            return await self.engine.release(leases)

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult:
        progress = min(max(progress, 0.0), 1.0)
        async with self._answering("heartbeat"):
            return await self.engine.heartbeat(job_id, lease_id, progress, stage)

    async def record_result(
        self, job_id: str, lease_id: str, report: ResultReport
    ) -> ResultRecorded:
        async with self._answering("set_result"):
            return await self.engine.record_result(job_id, lease_id, report)

    async def report_and_claim(
        self,
        worker_id: str,
        models: Sequence[str],
        results: Sequence[LeaseResult],
        max_jobs: int,
        pool: str = "",
        settle: bool = True,
    ) -> ReportedAndClaimed:
        wanted = claim_classes(claim_models(models), pool) if max_jobs > 0 else []
        limit = claim_limit(max_jobs) if wanted else 0
        with self._reporting("report_and_claim"):
            reported = await self.engine.report_and_claim(worker_id, wanted, results, limit)
            if settle or reported.claimed:
                await self._settled_or_give_back(reported.claimed)
            return reported

    async def settled(self, soon: bool = False) -> None:
        with self._reporting("settled"):
            await self.engine.settled(soon)

    # Operations --------------------------------------------------------------------
    async def recover(self) -> list[JobEvent]:
        async with self._answering("recover"):
            return await self.engine.recover()

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        async with self._answering("acquire_leadership"):
            return await self.engine.acquire_leadership(holder, ttl)

    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[JobEvent]:
        async with self._answering("events"):
            return await self.engine.events(after, count, block)

    async def newest_event_id(self) -> str:
        async with self._answering("newest_event_id"):
            return await self.engine.newest_event_id()

    async def ready_counts(self) -> dict[tuple[str, Priority, str], int]:
        async with self._answering("queue_depths"):
            return await self.engine.ready_counts()

    async def queue_depths(self) -> dict[tuple[str, Priority], int]:
        depths: dict[tuple[str, Priority], int] = {}
        for (model, priority, _), count in (await self.ready_counts()).items():
            depths[(model, priority)] = depths.get((model, priority), 0) + count
        return depths

    async def in_flight(self) -> dict[str, int]:
        async with self._answering("in_flight"):
            return await self.engine.in_flight()

    # The fleet -----------------------------------------------------------------------
    async def record_workers(self, seen: Sequence[WorkerSighting]) -> None:
        if not seen:
            return
        with self._reporting("record_workers"):
            await self.engine.record_workers(seen)

    async def list_workers(self) -> list[WorkerInfo]:
        with self._reporting("list_workers"):
            return await self.engine.list_workers()

    async def queue_stats(self) -> list[QueueStats]:
        with self._reporting("queue_stats"):
            return await self.engine.queue_stats()

    async def demand(self, model: str, pool: str | None) -> int:
        with self._reporting("demand"):
            return await self.engine.demand(model, pool)

    def listen_model(
        self, model: str, every_change: bool = False
    ) -> contextlib.AbstractContextManager[Listener]:
        topics = [f"r {model}", f"q {model}"]
        return self.engine.listen([*topics, EVERY_CHANGE] if every_change else topics)


class _Answering(contextlib.AbstractAsyncContextManager[None]):
    """StoreFront._answering: a class, not a generator (it wraps every store call,
    and each generator-based context manager costs about a microsecond more)."""

    __slots__ = ("_front", "_operation")

    def __init__(self, front: StoreFront, operation: str) -> None:
        self._front = front
        self._operation = operation

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: object
    ) -> None:
        report = self._front._reporting(self._operation)
        with report:  # a failure to settle is the one reported
            await self._front.engine.settled()
        if error is not None:
            report.saw(error)
