"""The daemon's timing and retry rules, against a scripted WorkerService.

How far apart the heartbeats come is measured and handed to `timings`; the
bench holds it to a third of the lease (bench/timing.py). Asserted here is
what cannot flake: beats arrive while the handler runs, retries go on, and
a stop does not wait out a long poll (one longer than any test runs).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
from collections.abc import AsyncIterator

import pytest
from google.rpc import code_pb2

from jobgate import JobContext
from tests.client.fake_job_service import UNAVAILABLE, Fail
from tests.helpers import assert_eventually
from tests.timings import Timings
from tests.worker.conftest import running_worker
from tests.worker.fake_worker_service import FakeWorkerService, start

LEASE = 0.9


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeWorkerService, str]]:
    service = FakeWorkerService(lease=LEASE)
    server, target = await start(service)
    yield service, target
    await server.stop(grace=None)


Fake = tuple[FakeWorkerService, str]


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


async def test_heartbeats_come_while_the_handler_burns_cpu(fake: Fake, timings: Timings) -> None:
    service, target = fake

    def busy(ctx: JobContext) -> str:
        end = time.monotonic() + LEASE * 2
        while time.monotonic() < end:  # pure-Python CPU work on the handler's thread
            sum(range(1000))
        return "done"

    service.add_job("J1")
    async with running_worker(target, "m", busy):
        await asyncio.wait_for(service.acknowledged.wait(), 10)

    reported = service.results[0].at
    during = [seen.at for seen in service.heartbeats if seen.at < reported]
    assert len(during) >= 2, "no heartbeats while the handler held the CPU"
    beats = gaps(during)
    # Typically a third of the lease; how close, and the longest gap, are the bench's.
    off = abs(statistics.median(beats) - LEASE / 3)
    timings("heartbeat: the median gap off a third of the lease", off, "CPU-bound handler")
    timings("heartbeat: the longest gap, lease 0.9 s", max(beats), "CPU-bound handler")


async def test_only_the_latest_progress_is_sent(fake: Fake) -> None:
    service, target = fake
    release = threading.Event()

    def chatty(ctx: JobContext) -> str:
        for step in range(1, 1001):
            ctx.report(step / 1000, f"step-{step}")
        release.wait(5)
        return "done"

    service.add_job("J1")
    async with running_worker(target, "m", chatty, progress_interval=0.1):

        async def latest_sent() -> bool:
            return any(seen.request.stage == "step-1000" for seen in service.heartbeats)

        await assert_eventually(latest_sent, timeout=5)
        release.set()
        await asyncio.wait_for(service.acknowledged.wait(), 10)

    assert len(service.heartbeats) < 20  # not one per report
    assert service.heartbeats[-1].request.progress == 1.0


async def test_set_result_is_retried_until_acknowledged(fake: Fake) -> None:
    service, target = fake
    service.result_script.extend([UNAVAILABLE, UNAVAILABLE, UNAVAILABLE])
    service.add_job("J1", payload=b"hello")

    async with running_worker(target, "m", lambda ctx: ctx.payload) as worker:
        await asyncio.wait_for(service.acknowledged.wait(), 15)

        async def done() -> bool:
            return not worker.active

        await assert_eventually(done)

    requests = [seen.request for seen in service.results]
    assert len(requests) == 4
    assert all(request == requests[0] for request in requests)
    assert requests[0].result == b"hello"
    assert requests[0].lease_id == "lease-J1"


async def test_a_forced_stop_mid_report_resends_the_outcome_not_a_failure(fake: Fake) -> None:
    service, target = fake
    service.result_script.extend([UNAVAILABLE] * 50)  # the worker server never accepts it
    service.add_job("J1", payload=b"hello")

    async with running_worker(target, "m", lambda ctx: ctx.payload):

        async def retrying() -> bool:
            return len(service.results) >= 2

        await assert_eventually(retrying)

    last = service.results[-1].request
    assert (last.status, last.result) == (service.results[0].request.status, b"hello")


async def test_a_forced_stop_hands_an_unfinished_job_back_as_retryable(fake: Fake) -> None:
    service, target = fake
    started = threading.Event()

    def endless(ctx: JobContext) -> str:
        started.set()
        ctx.cancel_event.wait(30)
        return "never reported"

    service.add_job("J1")
    async with running_worker(target, "m", endless):
        assert await asyncio.to_thread(started.wait, 5)

    [report] = [seen.request for seen in service.results]
    assert (report.error_code, report.retryable) == ("WORKER_SHUTDOWN", True)


async def test_a_lost_lease_stops_the_job_and_reports_nothing(fake: Fake) -> None:
    service, target = fake
    service.heartbeat_script.append(Fail(code_pb2.FAILED_PRECONDITION, "LEASE_LOST"))
    stopped = threading.Event()

    def waits(ctx: JobContext) -> str:
        if ctx.cancel_event.wait(10):
            stopped.set()
        return "late"

    service.add_job("J1")
    async with running_worker(target, "m", waits) as worker:
        assert await asyncio.to_thread(stopped.wait, 5)

        async def job_over() -> bool:  # after this no (wrong) SetResult can come
            return not worker.active

        await assert_eventually(job_over)

    assert service.results == []
    assert len(service.heartbeats) == 1  # no heartbeats after the lease is gone


async def test_heartbeats_keep_retrying_while_the_server_is_unreachable(fake: Fake) -> None:
    service, target = fake
    service.heartbeat_script.extend([UNAVAILABLE, UNAVAILABLE])
    release = threading.Event()

    def held(ctx: JobContext) -> str:
        release.wait(10)
        return "done"

    service.add_job("J1")
    async with running_worker(target, "m", held):

        async def recovered() -> bool:
            return len(service.heartbeats) >= 3

        await assert_eventually(recovered, timeout=5)
        release.set()
        await asyncio.wait_for(service.acknowledged.wait(), 10)

    assert service.results[0].request.result == b"done"


async def test_a_claim_asks_for_as_many_jobs_as_there_are_free_slots(fake: Fake) -> None:
    service, target = fake

    async with running_worker(target, "m", lambda ctx: None, concurrency=3):

        async def polled() -> bool:
            return bool(service.claims)

        await assert_eventually(polled)

    assert service.claims[0].request.max_jobs == 3


async def test_stopping_an_idle_worker_does_not_wait_for_its_long_poll(
    fake: Fake, timings: Timings
) -> None:
    service, target = fake

    # A poll longer than the test's own timeout: a stop that waited for it fails.
    async with running_worker(target, "m", lambda ctx: None, claim_wait=600.0) as worker:

        async def polling() -> bool:
            return bool(service.claims)

        await assert_eventually(polling)
        started = time.monotonic()
        worker.stop()

    timings("worker stop: an idle daemon stops", time.monotonic() - started)
