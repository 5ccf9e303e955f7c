"""Health follows the store probe; reflection is served; recovery runs under leadership."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from jobgate.v1 import job_pb2, job_service_pb2
from serving.metrics import Metrics, sample
from serving.recovery import Recovery, StoreProbe
from serving.settings import ServerSettings
from store.errors import StoreUnavailable
from store.memory import LocalStore
from store.model import StoreSettings
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class FlakyStore(LocalStore):
    down = False

    async def ping(self) -> None:
        if self.down:
            raise StoreUnavailable("down")


async def _status(harness: Harness, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(harness.worker_channel)
    return int((await stub.Check(health_pb2.HealthCheckRequest(service=service))).status)


async def test_health_follows_the_store_probe(make_harness: MakeHarness) -> None:
    store = FlakyStore(StoreSettings())
    harness = await make_harness(store=store)
    probe = StoreProbe(harness.serving.store, harness.metrics, harness.serving.health)
    await probe.step()
    assert await _status(harness, "jobgate.v1.WorkerService") == SERVING
    assert await harness.value("jobgate_store_up") == 1
    store.down = True
    await probe.step()
    assert await _status(harness, "") == NOT_SERVING
    assert await _status(harness, "jobgate.v1.WorkerService") == NOT_SERVING
    assert await harness.value("jobgate_store_up") == 0
    store.down = False
    await probe.step()
    assert await _status(harness, "") == SERVING


async def test_reflection_lists_the_services(harness: Harness) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(harness.job_channel)

    async def ask() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    async for response in stub.ServerReflectionInfo(ask()):
        names = {s.name for s in response.list_services_response.service}
        assert {"jobgate.v1.JobService", "grpc.health.v1.Health"} <= names
        break


async def test_recovery_requeues_an_expired_lease_promptly(
    make_harness: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobgate.recovery")
    harness = await make_harness(settings=ServerSettings(lease_timeout=timedelta(milliseconds=200)))
    job = await harness.submit()
    await harness.claim()
    stop = asyncio.Event()
    loop = asyncio.create_task(Recovery(harness.serving.store, harness.metrics).run(stop))

    async def requeued() -> bool:
        got = await harness.job.Get(job_service_pb2.GetRequest(job_id=job.id))
        return got.job.status == job_pb2.JOB_STATUS_QUEUED

    try:
        await assert_eventually(requeued, timeout=3)
    finally:
        stop.set()
        await loop
    assert await harness.value("jobgate_leases_expired_total", {"model": "m"}) == 1
    [line] = [r for r in caplog.records if r.getMessage() == "recovered"]
    fields = vars(line)
    assert (fields["job_id"], fields["tenant"], fields["to"]) == (job.id, "default", "queued")


async def test_two_recovery_loops_handle_an_expiry_once(make_harness: MakeHarness) -> None:
    short = ServerSettings(lease_timeout=timedelta(milliseconds=200))
    harness = await make_harness(settings=short)
    job = await harness.submit()
    await harness.claim()
    metrics = [Metrics(), Metrics()]
    loops = [Recovery(harness.serving.store, m, interval=0.05) for m in metrics]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(loop.run(stop)) for loop in loops]

    async def requeued() -> bool:
        got = await harness.job.Get(job_service_pb2.GetRequest(job_id=job.id))
        return got.job.status == job_pb2.JOB_STATUS_QUEUED

    try:
        await assert_eventually(requeued, timeout=2)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    counted = [
        await asyncio.to_thread(sample, m, "jobgate_leases_expired_total", {"model": "m"})
        for m in metrics
    ]
    assert sorted(c or 0 for c in counted) == [0, 1]
