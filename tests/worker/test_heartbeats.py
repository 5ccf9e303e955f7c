"""The worker's one heartbeat scheduler: all held jobs' leases in as few calls as it can."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Sized
from contextlib import asynccontextmanager

import pytest

from jobgate import JobContext
from tests.client.fake_job_service import UNAVAILABLE
from tests.helpers import assert_eventually
from tests.timings import Timings
from tests.worker.conftest import running_worker
from tests.worker.fake_worker_service import FakeWorkerService, start

LEASE = 0.9


@asynccontextmanager
async def serving(service: FakeWorkerService) -> AsyncIterator[str]:
    server, target = await start(service)
    try:
        yield target
    finally:
        await server.stop(grace=None)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeWorkerService, str]]:
    service = FakeWorkerService(lease=LEASE)
    async with serving(service) as target:
        yield service, target


Fake = tuple[FakeWorkerService, str]


def held_until(release: threading.Event) -> Callable[[JobContext], str]:
    def held(ctx: JobContext) -> str:
        release.wait(10)
        return "done"

    return held


def beaten_jobs(service: FakeWorkerService, call: int) -> set[str]:
    return {beat.job_id for beat in service.beat_calls[call].request.heartbeats}


async def at_least(count: int, items: Callable[[], Sized], timeout: float = 5) -> None:
    async def enough() -> bool:
        return len(items()) >= count

    await assert_eventually(enough, timeout=timeout)


async def test_several_held_jobs_are_heartbeated_in_one_call(fake: Fake) -> None:
    service, target = fake
    release = threading.Event()
    for index in range(4):
        service.add_job(f"J{index}")

    async with running_worker(target, "m", held_until(release), concurrency=4):
        await at_least(3, lambda: service.beat_calls)
        calls = list(service.beat_calls)
        release.set()
        await at_least(4, lambda: service.results)

    assert all(len(call.request.heartbeats) == 4 for call in calls)
    assert service.calls["Heartbeat"] == 0


async def test_a_job_due_soon_is_beaten_early_with_one_due_now() -> None:
    # A 3 s lease: a beat every second, and a job claimed within half a second
    # of another rides with the other's beat instead of a call of its own.
    release = threading.Event()
    started: set[str] = set()

    def held(ctx: JobContext) -> str:
        started.add(ctx.job.id)
        release.wait(10)
        return "done"

    service = FakeWorkerService(lease=3.0)
    async with serving(service) as target:
        service.add_job("J1")
        async with running_worker(target, "m", held, concurrency=2):

            async def first_started() -> bool:
                return "J1" in started

            await assert_eventually(first_started)
            service.add_job("J2")
            await at_least(1, lambda: service.beat_calls)
            release.set()
            await at_least(2, lambda: service.results)

        assert beaten_jobs(service, 0) == {"J1", "J2"}


async def test_without_the_fast_path_each_held_job_gets_its_own_heartbeat() -> None:
    release = threading.Event()
    service = FakeWorkerService(lease=LEASE, fast_path=False)
    async with serving(service) as target:
        for index in range(3):
            service.add_job(f"J{index}")
        async with running_worker(target, "m", held_until(release), concurrency=3):
            await at_least(6, lambda: service.heartbeats)
            release.set()
            await at_least(3, lambda: service.results)

        assert service.calls["Heartbeat"] == len(service.heartbeats)
        assert {seen.request.job_id for seen in service.heartbeats} == {"J0", "J1", "J2"}


async def test_a_failed_batched_call_is_retried_with_every_job(
    fake: Fake, timings: Timings
) -> None:
    service, target = fake
    service.heartbeat_script.append(UNAVAILABLE)  # the first call fails as a whole
    release = threading.Event()
    for index in range(3):
        service.add_job(f"J{index}")

    async with running_worker(target, "m", held_until(release), concurrency=3):
        await at_least(2, lambda: service.beat_calls)
        release.set()
        await at_least(3, lambda: service.results)

    failed, retried = service.beat_calls[:2]
    # With every job of the failed call; sooner than the usual third of the
    # lease (the bench's bound: before the leases lapse).
    assert beaten_jobs(service, 1) == {"J0", "J1", "J2"}
    timings("heartbeat: a failed call retried, lease 0.9 s", retried.at - failed.at)


async def test_cancel_requested_on_one_job_abandons_only_that_job(fake: Fake) -> None:
    service, target = fake
    service.heartbeat_script.append("cancel")  # the first beat of the first call
    release = threading.Event()
    cancelled: list[str] = []

    def held(ctx: JobContext) -> str:
        while not release.is_set():
            if ctx.cancel_event.wait(0.02):
                cancelled.append(ctx.job.id)
                return "cancelled"
        return "done"

    service.add_job("J1")
    service.add_job("J2")
    async with running_worker(target, "m", held, concurrency=2) as worker:
        await at_least(1, lambda: cancelled)
        beats_then = len(service.heartbeats)
        await at_least(beats_then + 2, lambda: service.heartbeats)  # the other lives on
        release.set()
        await at_least(1, lambda: service.results)

        async def over() -> bool:
            return not worker.active

        await assert_eventually(over)

    [gone] = cancelled
    [result] = [seen.request for seen in service.results]
    assert result.job_id != gone and result.result == b"done"
    assert gone not in {seen.request.job_id for seen in service.heartbeats[beats_then:]}
