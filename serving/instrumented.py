"""A Store wrapper that counts failed store calls in jobgate_store_errors_total.

A failure is the store being unreachable (`StoreUnavailable`) or raising
something that is not a `StoreError` at all; domain outcomes such as
JobNotFound or LeaseLost are answers, not store errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import timedelta
from typing import TypeVar

from serving.metrics import Metrics
from store.errors import StoreError, StoreUnavailable
from store.model import (
    CancelResult,
    ClaimedJob,
    HeartbeatResult,
    Job,
    JobEvent,
    JobStatus,
    Priority,
    ResultRecorded,
    StoreSettings,
    SubmitRequest,
    SubmitResult,
)
from store.protocol import Store

T = TypeVar("T")


class InstrumentedStore(Store):
    """Delegates every call to `inner`, counting failures per operation."""

    def __init__(self, inner: Store, metrics: Metrics) -> None:
        self.inner = inner
        self.settings: StoreSettings = inner.settings
        self._metrics = metrics

    def _failed(self, error: Exception) -> bool:
        return isinstance(error, StoreUnavailable) or not isinstance(error, StoreError)

    async def _call(self, operation: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except Exception as error:
            if self._failed(error):
                self._metrics.store_failed(operation)
            raise

    async def open(self) -> None:
        await self._call("open", self.inner.open())

    async def close(self) -> None:
        await self._call("close", self.inner.close())

    async def ping(self) -> None:
        await self._call("ping", self.inner.ping())

    async def submit(self, request: SubmitRequest) -> SubmitResult:
        return await self._call("submit", self.inner.submit(request))

    async def get(self, tenant: str, job_id: str) -> Job:
        return await self._call("get", self.inner.get(tenant, job_id))

    async def payload(self, tenant: str, job_id: str) -> bytes:
        return await self._call("payload", self.inner.payload(tenant, job_id))

    async def list_children(self, tenant: str, job_id: str) -> list[Job]:
        return await self._call("list_children", self.inner.list_children(tenant, job_id))

    async def queue_position(self, tenant: str, job_id: str) -> int | None:
        return await self._call("queue_position", self.inner.queue_position(tenant, job_id))

    async def claim(
        self,
        worker_id: str,
        models: Sequence[str],
        max_jobs: int = 1,
        wait: timedelta = timedelta(0),
    ) -> list[ClaimedJob]:
        return await self._call("claim", self.inner.claim(worker_id, models, max_jobs, wait))

    async def release(self, leases: Sequence[ClaimedJob]) -> int:
        return await self._call("release", self.inner.release(leases))

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult:
        return await self._call(
            "heartbeat", self.inner.heartbeat(job_id, lease_id, progress, stage)
        )

    async def record_result(
        self,
        job_id: str,
        lease_id: str,
        status: JobStatus,
        result: bytes = b"",
        result_content_type: str = "",
        error_code: str = "",
        error_message: str = "",
        retryable: bool = False,
    ) -> ResultRecorded:
        call = self.inner.record_result(
            job_id,
            lease_id,
            status,
            result,
            result_content_type,
            error_code,
            error_message,
            retryable,
        )
        return await self._call("set_result", call)

    async def cancel(self, tenant: str, job_id: str, reason: str = "") -> CancelResult:
        return await self._call("cancel", self.inner.cancel(tenant, job_id, reason))

    async def recover(self) -> list[JobEvent]:
        return await self._call("recover", self.inner.recover())

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        return await self._call("acquire_leadership", self.inner.acquire_leadership(holder, ttl))

    async def watch(self, tenant: str, job_id: str) -> AsyncIterator[Job]:
        snapshots = self.inner.watch(tenant, job_id)
        try:
            while True:
                try:
                    job = await snapshots.__anext__()
                except StopAsyncIteration:
                    return
                except Exception as error:
                    if self._failed(error):
                        self._metrics.store_failed("watch")
                    raise
                yield job
        finally:
            aclose = getattr(snapshots, "aclose", None)
            if aclose is not None:
                await aclose()

    async def events(
        self,
        after: str = "0",
        count: int = 100,
        block: timedelta | None = None,
    ) -> list[JobEvent]:
        return await self._call("events", self.inner.events(after, count, block))

    async def queue_depths(self) -> dict[tuple[str, Priority], int]:
        return await self._call("queue_depths", self.inner.queue_depths())

    async def in_flight(self) -> dict[str, int]:
        return await self._call("in_flight", self.inner.in_flight())
