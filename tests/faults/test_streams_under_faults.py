"""Open streams and long polls while jobs flow and workers die: every StreamStatus
ends only at its job's terminal snapshot, and nothing is lost (how soon leases are
recovered is handed to `timings`: the bench holds it to its bound)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable

import grpc
import pytest

from jobgate.v1 import job_service_pb2, worker_service_pb2, worker_service_pb2_grpc
from tests.e2e.api import duration
from tests.faults.conftest import RigFactory, Scale
from tests.faults.ledger import TERMINAL, Call, percentile, recovery_times
from tests.faults.rig import Figures, Rig, assert_clean, figures_of, payload, status_name
from tests.timings import Timings

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT = "acme"
LEASE = 1.0


#: Times one watcher may reopen its stream after UNAVAILABLE (on a loaded
#: host a new Redis connection can time out: the store's documented answer,
#: which a client meets by watching again, as JobClient's watch does).
RESUMES = 3


async def watch(rig: Rig, job_id: str) -> list[str]:
    """Every status the job's StreamStatus showed, in order, recorded as observations."""
    seen: list[str] = []
    for attempt in range(RESUMES + 1):
        call = rig.stubs[0].StreamStatus(
            job_service_pb2.StreamStatusRequest(job_id=job_id),
            metadata=(("x-jobgate-tenant", TENANT),),
            timeout=300,
        )
        try:
            async for response in call:
                status = status_name(response.job.status)
                now = time.time()
                rig.calls.append(_observation(job_id, now, status))
                seen.append(status)
            return seen
        except grpc.aio.AioRpcError as error:
            if error.code() is not grpc.StatusCode.UNAVAILABLE or attempt == RESUMES:
                raise
    return seen


def _observation(job_id: str, when: float, status: str) -> Call:
    return Call("StreamStatus", job_id, when, when, status=status)


async def long_poll(
    stub: worker_service_pb2_grpc.WorkerServiceAsyncStub, stop: asyncio.Event
) -> None:
    """A worker waiting the longest allowed for a model no job has."""
    request = worker_service_pb2.ClaimNextRequest(
        worker_id=f"idle-{random.randrange(10**6)}", models=["idle"], wait=duration(60)
    )
    while not stop.is_set():
        with contextlib.suppress(grpc.aio.AioRpcError):
            await stub.ClaimNext(request, timeout=70)


async def test_open_streams_and_long_polls_while_workers_die(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None], timings: Timings
) -> None:
    rig = make_rig()
    streams, polls, kills = scale(200, 2000), scale(20, 200), scale(5, 40)
    channel = grpc.aio.insecure_channel(rig.deployment.worker_target)
    worker_stub = worker_service_pb2_grpc.WorkerServiceStub(channel)
    stop = asyncio.Event()
    pollers = [asyncio.create_task(long_poll(worker_stub, stop)) for _ in range(polls)]
    for _ in range(3):
        rig.start_worker(concurrency=4)
    ids: list[str] = []
    watchers: list[asyncio.Task[list[str]]] = []
    gate = asyncio.Semaphore(16)

    # Every job is submitted and watched at once: the streams stay open together
    # while the workers (12 slots) work through the queue.
    async def submit_and_watch() -> None:
        async with gate:
            job_id = await rig.submit_job(TENANT, payload(random.uniform(0.1, 0.6)))
        ids.append(job_id)
        watchers.append(asyncio.create_task(watch(rig, job_id)))

    submitting = asyncio.gather(*(submit_and_watch() for _ in range(streams)))
    done = 0
    while done < kills and not (submitting.done() and not _running(rig)):
        await asyncio.sleep(random.uniform(0.6, 1.2))
        busy = [w for w in rig.alive_workers() if _running_on(rig, w.worker_id)]
        if busy:
            rig.kill_worker(random.choice(busy))
            rig.start_worker(concurrency=4)
            done += 1
    await submitting
    ledger = await rig.collect({TENANT: ids}, timeout=scale(90, 900))
    seen = await asyncio.wait_for(asyncio.gather(*watchers), 60)
    stop.set()
    for poller in pollers:
        poller.cancel()
    await asyncio.gather(*pollers, return_exceptions=True)
    await channel.close(None)

    assert_clean(ledger)
    bad = [(job_id, s) for job_id, s in zip(ids, seen, strict=True) if not _ends_at_terminal(s)]
    assert bad == [], bad[:5]
    late = percentile(recovery_times(ledger), 0.99) - LEASE
    timings("worker SIGKILL: recovery p99 past the lease", late, "streams and long polls open")
    figures(
        figures_of(
            "open streams and long polls, workers SIGKILLed",
            ledger,
            done,
            streams=streams,
            long_polls=polls,
        )
    )


def _ends_at_terminal(statuses: list[str]) -> bool:
    """The stream's last snapshot, and only its last, is terminal."""
    return bool(statuses) and statuses[-1] in TERMINAL and not set(statuses[:-1]) & TERMINAL


def _running(rig: Rig) -> bool:
    return any(_running_on(rig, w.worker_id) for w in rig.alive_workers())


def _running_on(rig: Rig, worker_id: str) -> bool:
    return any(a.worker_id == worker_id and a.end is None for a in rig.read_attempts())
