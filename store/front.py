"""The thin Store front: each public method normalises its input, reports a failure
once, and calls the engine; waiting (a claim's long poll, a watch) is written here once.

An `Engine` is a backend's transitions and reads (LocalEngine in
store/memory/, RedisEngine in store/redis/): it takes input already
normalised (claim models deduplicated, the claim limit applied, progress
clamped) and never reports failures itself. `StoreFront` is the `Store`
the servers hold; `LocalStore` and `RedisStore` are it over their engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
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
    ListCursor,
    Priority,
    ReportedAndClaimed,
    ResultRecorded,
    ResultReport,
    StoreSettings,
    SubmitRequest,
    SubmitResult,
)
from store.policy import claim_limit, claim_models, watch_view
from store.poll import Listener, long_poll
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
        self, worker_id: str, models: list[str], max_jobs: int
    ) -> list[ClaimedJob]: ...

    async def release(self, leases: Sequence[ClaimedJob]) -> int: ...

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult: ...

    async def record_result(
        self, job_id: str, lease_id: str, report: ResultReport
    ) -> ResultRecorded: ...

    async def report_and_claim(
        self,
        worker_id: str,
        models: list[str],
        results: Sequence[tuple[str, str, ResultReport]],
        max_jobs: int,
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
    async def queue_depths(self) -> dict[tuple[str, Priority], int]: ...
    async def in_flight(self) -> dict[str, int]: ...

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` (tests, debugging)."""
        ...


class StoreFront(Store):
    """The Store over one engine (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._on_failure: FailureHook = ignore_failure

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

    @contextlib.contextmanager
    def _reporting(self, operation: str) -> Iterator[None]:
        with reporting(self._on_failure, operation):
            yield

    # Lifecycle -----------------------------------------------------------------
    async def open(self) -> None:
        with self._reporting("open"):
            await self.engine.open()

    async def close(self) -> None:
        await self.engine.close()

    async def ping(self) -> None:
        with self._reporting("ping"):
            await self.engine.ping()

    # Tenant-facing ---------------------------------------------------------------
    async def submit(self, request: SubmitRequest) -> SubmitResult:
        with self._reporting("submit"):
            return await self.engine.submit(request)

    async def submit_batch(self, requests: Sequence[SubmitRequest]) -> list[SubmitResult]:
        if not requests:
            return []
        with self._reporting("submit_batch"):
            return await self.engine.submit_batch(requests)

    async def get(self, tenant: str | None, job_id: str) -> Job:
        with self._reporting("get"):
            return await self.engine.get(tenant, job_id)

    async def payload(self, tenant: str | None, job_id: str) -> bytes:
        with self._reporting("payload"):
            return await self.engine.payload(tenant, job_id)

    async def list_children(self, tenant: str | None, job_id: str) -> list[Job]:
        with self._reporting("list_children"):
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
        with self._reporting("list_jobs"):
            return await self.engine.list_jobs(tenant, query, after, page_size)

    async def retry_job(self, tenant: str | None, job_id: str, actor: str = "") -> Job:
        with self._reporting("retry_job"):
            return await self.engine.retry_job(tenant, job_id, actor)

    async def cancel(
        self, tenant: str | None, job_id: str, reason: str = "", actor: str = ""
    ) -> CancelResult:
        with self._reporting("cancel"):
            return await self.engine.cancel(tenant, job_id, reason, actor)

    async def watch(self, tenant: str | None, job_id: str) -> AsyncIterator[Job]:
        engine = self.engine
        with self._reporting("watch"), engine.listen([f"j {job_id}"]) as listener:
            job = await engine.read_for_watch(tenant, job_id)
            seen: tuple[object, ...] | None = None
            while True:
                if job.status is JobStatus.QUEUED and job.kind is not JobKind.GROUP:
                    # positions move when the queue shrinks or a job is queued
                    # ahead; a move published between our read and now was
                    # not heard, so read again once the topics are new
                    new_q = listener.add(f"q {job.model}")
                    new_r = listener.add(f"r {job.model}")
                    if new_q or new_r:
                        listener.clear()
                        job = await engine.read_for_watch(tenant, job_id)
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
                job = await engine.read_for_watch(tenant, job_id)

    # Worker-facing ---------------------------------------------------------------
    async def claim(
        self,
        worker_id: str,
        models: Sequence[str],
        max_jobs: int = 1,
        wait: timedelta = timedelta(0),
    ) -> list[ClaimedJob]:
        wanted = claim_models(models)
        if not wanted:
            return []
        limit = claim_limit(max_jobs)
        engine = self.engine
        with self._reporting("claim"):
            return await long_poll(
                engine.listen((f"r {model}" for model in wanted), wake_one=True),
                lambda: engine.claim_now(worker_id, wanted, limit),
                wait,
                closed=lambda: engine.closed,
                reads=engine.waiter_reads,
                recheck=engine.recheck,
            )

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` (tests, debugging)."""
        return self.engine.waiting_claims(model)

    async def release(self, leases: Sequence[ClaimedJob]) -> int:
        if not leases:
            return 0
        with self._reporting("release"):
            return await self.engine.release(leases)

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult:
        progress = min(max(progress, 0.0), 1.0)
        with self._reporting("heartbeat"):
            return await self.engine.heartbeat(job_id, lease_id, progress, stage)

    async def record_result(
        self, job_id: str, lease_id: str, report: ResultReport
    ) -> ResultRecorded:
        with self._reporting("set_result"):
            return await self.engine.record_result(job_id, lease_id, report)

    async def report_and_claim(
        self,
        worker_id: str,
        models: Sequence[str],
        results: Sequence[tuple[str, str, ResultReport]],
        max_jobs: int,
    ) -> ReportedAndClaimed:
        wanted = claim_models(models) if max_jobs > 0 else []
        limit = claim_limit(max_jobs) if wanted else 0
        with self._reporting("report_and_claim"):
            return await self.engine.report_and_claim(worker_id, wanted, results, limit)

    # Operations --------------------------------------------------------------------
    async def recover(self) -> list[JobEvent]:
        with self._reporting("recover"):
            return await self.engine.recover()

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        with self._reporting("acquire_leadership"):
            return await self.engine.acquire_leadership(holder, ttl)

    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[JobEvent]:
        with self._reporting("events"):
            return await self.engine.events(after, count, block)

    async def newest_event_id(self) -> str:
        with self._reporting("newest_event_id"):
            return await self.engine.newest_event_id()

    async def queue_depths(self) -> dict[tuple[str, Priority], int]:
        with self._reporting("queue_depths"):
            return await self.engine.queue_depths()

    async def in_flight(self) -> dict[str, int]:
        with self._reporting("in_flight"):
            return await self.engine.in_flight()
