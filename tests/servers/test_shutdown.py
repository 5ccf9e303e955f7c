"""Graceful drain: in-flight unary calls finish, new calls SHUTTING_DOWN, polls end cleanly."""

from __future__ import annotations

import asyncio
import io
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from jobgate.cli._servers import process as server_process
from jobgate.v1 import job_service_pb2, worker_service_pb2
from serving.settings import Address, ServerSettings
from store.memory import LocalStore
from store.model import JobStatus, StoreSettings, SubmitRequest, SubmitResult
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import EOF, Harness, fails, seconds
from tests.servers.test_report_and_claim import completed, exchange
from tests.store.conftest import claim_is_waiting
from tests.timings import Timings


class GatedStore(LocalStore):
    """Submit waits for `gate`, so a test can hold a call in flight."""

    def __init__(self, settings: StoreSettings) -> None:
        super().__init__(settings)
        self.gate = asyncio.Event()

    async def submit(self, request: SubmitRequest) -> SubmitResult:
        await self.gate.wait()
        return await super().submit(request)


async def _in_flight(harness: Harness, count: int) -> None:
    async def reached() -> bool:
        return harness.serving.lifecycle.in_flight == count

    await assert_eventually(reached)


async def _drain(harness: Harness) -> None:
    await harness.serving.health.shut_down()
    harness.serving.lifecycle.start_drain()


async def test_in_flight_call_finishes_and_new_calls_are_shutting_down(
    make_harness: MakeHarness,
) -> None:
    store = GatedStore(StoreSettings())
    harness = await make_harness(store=store)
    submit = asyncio.create_task(harness.submit())
    await _in_flight(harness, 1)
    await _drain(harness)
    failure = await fails(harness.submit())
    assert (failure.code, failure.reasons) == (grpc.StatusCode.UNAVAILABLE, ["SHUTTING_DOWN"])
    assert failure.retry_delay is not None
    store.gate.set()
    assert (await submit).id


#: Less than the polls' 30 s wait, so a poll the drain did not end fails the test.
HANG = 20


async def test_long_poll_returns_empty_when_draining(harness: Harness, timings: Timings) -> None:
    claim = asyncio.create_task(harness.claim(wait=30))
    await _in_flight(harness, 1)
    started = time.monotonic()
    await _drain(harness)
    assert await asyncio.wait_for(claim, HANG) == []
    timings("drain: a long poll answers empty", time.monotonic() - started, "ClaimNext")


async def test_report_and_claim_long_poll_returns_empty_when_draining(
    harness: Harness, timings: Timings
) -> None:
    call = asyncio.create_task(exchange(harness, max_jobs=1, wait=seconds(30)))
    await claim_is_waiting(harness.serving.store, "m")
    started = time.monotonic()
    await _drain(harness)
    assert list((await asyncio.wait_for(call, HANG)).jobs) == []
    timings("drain: a long poll answers empty", time.monotonic() - started, "ReportAndClaim")


async def test_report_and_claim_long_poll_ended_by_the_drain_still_applies_its_results(
    harness: Harness,
) -> None:
    job = await harness.submit()
    [claimed] = await harness.claim()
    call = asyncio.create_task(
        exchange(harness, results=[completed(claimed)], max_jobs=1, wait=seconds(30))
    )
    await claim_is_waiting(harness.serving.store, "m")
    await _drain(harness)
    response = await asyncio.wait_for(call, 5)
    assert [a.outcome for a in response.results] == [worker_service_pb2.REPORT_OUTCOME_APPLIED]
    # read from the store: a draining server refuses Get
    assert (await harness.serving.store.get("default", job.id)).status is JobStatus.COMPLETED


async def test_stream_ends_cleanly_when_draining(harness: Harness) -> None:
    job = await harness.submit()
    stream = harness.job.StreamStatus(job_service_pb2.StreamStatusRequest(job_id=job.id))
    await stream.read()
    await _drain(harness)
    assert await stream.read() is EOF
    assert await stream.code() is grpc.StatusCode.OK


async def test_health_is_not_serving_while_draining(harness: Harness) -> None:
    health = health_pb2_grpc.HealthStub(harness.job_channel)
    request = health_pb2.HealthCheckRequest(service="jobgate.v1.JobService")
    serving = health_pb2.HealthCheckResponse.SERVING
    assert (await health.Check(request)).status == serving
    await _drain(harness)
    assert (await health.Check(request)).status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_process_drains_and_exits_zero(timings: Timings) -> None:
    loopback = Address("127.0.0.1", 0)
    settings = ServerSettings(
        listen=loopback,
        worker_listen=loopback,
        metrics_listen=loopback,
        grace_period=ServerSettings().grace_period / 10,
    )
    out = io.StringIO()
    process = server_process("serve", settings, out=out, install_signals=False)
    running = asyncio.create_task(process.run())
    await asyncio.wait_for(process.started.wait(), 5)
    job_address = next(item.address for item in process.listeners if item.name == "job")
    assert out.getvalue().startswith(f"jobgate serve listening job={job_address} ")
    started = time.monotonic()
    process.request_stop()
    assert await asyncio.wait_for(running, HANG) == 0
    late = time.monotonic() - started - settings.grace_period.total_seconds()
    timings("drain: exit past the grace period", late, "serve in-process, idle")
