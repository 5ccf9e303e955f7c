"""StreamStatus: a snapshot per change, ending after the terminal one; nothing leaks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from store.memory import LocalStore
from store.model import Job, StoreSettings
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import EOF, Harness, next_job


class CountingStore(LocalStore):
    """Counts watch() generators that are still open."""

    open_watches = 0

    async def watch(self, tenant: str | None, job_id: str) -> AsyncIterator[Job]:
        self.open_watches += 1
        try:
            async for job in super().watch(tenant, job_id):
                yield job
        finally:
            self.open_watches -= 1


async def test_stream_sends_each_change_then_ends_after_terminal(harness: Harness) -> None:
    job = await harness.submit()
    stream = harness.job.StreamStatus(job_service_pb2.StreamStatusRequest(job_id=job.id))
    first = await next_job(stream)
    assert first.status == job_pb2.JOB_STATUS_QUEUED
    assert first.HasField("queue_position") and first.queue_position == 0
    [claimed] = await harness.claim()
    assert (await next_job(stream)).status == job_pb2.JOB_STATUS_PROCESSING
    beat = worker_service_pb2.HeartbeatRequest(
        job_id=job.id, lease_id=claimed.lease_id, progress=0.5, stage="half"
    )
    await harness.worker.Heartbeat(beat)
    progressed = await next_job(stream)
    assert (progressed.progress, progressed.stage) == (0.5, "half")
    await harness.complete(claimed)
    assert (await next_job(stream)).status == job_pb2.JOB_STATUS_COMPLETED
    assert await stream.read() is EOF
    assert await stream.code() is grpc.StatusCode.OK


async def test_client_going_away_closes_the_store_watch(make_harness: MakeHarness) -> None:
    store = CountingStore(StoreSettings())
    harness = await make_harness(store=store)
    job = await harness.submit()
    stream = harness.job.StreamStatus(job_service_pb2.StreamStatusRequest(job_id=job.id))
    await stream.read()
    assert store.open_watches == 1
    stream.cancel()

    async def released() -> bool:
        return store.open_watches == 0 and harness.serving.lifecycle.in_flight == 0

    await assert_eventually(released)


async def test_stream_refreshes_the_queue_position_as_jobs_ahead_leave(harness: Harness) -> None:
    await harness.submit()
    behind = await harness.submit()
    stream = harness.job.StreamStatus(job_service_pb2.StreamStatusRequest(job_id=behind.id))
    assert (await next_job(stream)).queue_position == 1
    await harness.claim()
    moved_up = await next_job(stream)
    assert moved_up.status == job_pb2.JOB_STATUS_QUEUED
    assert moved_up.HasField("queue_position") and moved_up.queue_position == 0
    stream.cancel()
