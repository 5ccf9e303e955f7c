"""The daemon's fast path: each result rides with the next claim in one ReportAndClaim.

The daemon runs in-process against in-process servers (LocalStore), so the
servers' own gRPC metrics count which calls it made.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from jobgate import JobContext
from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2_grpc
from jobgate.worker._transport import Classic, FastPath
from serving.grpc_server import new_server
from tests.helpers import assert_eventually
from tests.servers.harness import LOOPBACK, Harness, start_harness
from tests.worker.conftest import running_worker, unique_model
from worker_server.server import SERVICE_NAME
from worker_server.worker_service import WorkerService


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    started = await start_harness()
    yield started
    await started.close()


async def handled(harness: Harness, method: str) -> float:
    labels = {
        "grpc_type": "unary",
        "grpc_service": "jobgate.v1.WorkerService",
        "grpc_method": method,
        "grpc_code": "OK",
    }
    return await harness.value("grpc_server_handled_total", labels) or 0.0


async def submit(harness: Harness, model: str, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model))
        ids.append((await harness.job.Submit(request, timeout=5)).job.id)
    return ids


async def all_completed(harness: Harness, ids: list[str]) -> None:
    async def done() -> bool:
        for job_id in ids:
            job = (await harness.job.Get(job_service_pb2.GetRequest(job_id=job_id))).job
            if job.status != job_pb2.JOB_STATUS_COMPLETED:
                return False
        return True

    await assert_eventually(done, timeout=20)


def noop(ctx: JobContext) -> str:
    return "ok"


async def test_queued_jobs_run_with_no_set_result_or_claim_next_call(harness: Harness) -> None:
    model = unique_model()
    ids = await submit(harness, model, 20)
    target = f"127.0.0.1:{harness.worker_port}"
    async with running_worker(target, model, noop, concurrency=1) as worker:
        await all_completed(harness, ids)
        assert isinstance(worker.transport, FastPath)
        # A graceful stop: the last result, riding with the open long poll,
        # goes again in a report of its own (the fixture's forced stop would
        # hand its job back with a SetResult instead).
        worker.stop()

        async def drained() -> bool:
            return not worker.active

        await assert_eventually(drained)
    assert await handled(harness, "SetResult") == 0
    assert await handled(harness, "ClaimNext") == 0
    # One call per job (result + next claim), plus the first claim and the last report.
    assert await handled(harness, "ReportAndClaim") <= len(ids) + 3


async def test_at_an_empty_queue_a_result_rides_with_the_next_long_poll(
    harness: Harness,
) -> None:
    model = unique_model()
    target = f"127.0.0.1:{harness.worker_port}"
    async with running_worker(target, model, noop, concurrency=1, claim_wait=30.0):
        ids = await submit(harness, model, 1)
        await all_completed(harness, ids)

        async def polling() -> bool:
            return harness.serving.lifecycle.in_flight >= 1

        await assert_eventually(polling)
        # Only the claim that fetched the job has finished: the result is
        # riding with the open long poll, not sent in a call of its own.
        assert await handled(harness, "ReportAndClaim") == 1


async def test_concurrent_results_share_calls(harness: Harness) -> None:
    model = unique_model()
    ids = await submit(harness, model, 40)
    target = f"127.0.0.1:{harness.worker_port}"
    async with running_worker(target, model, noop, concurrency=8) as worker:
        await all_completed(harness, ids)

        # Recorded on the server is not yet answered to the daemon: a job whose
        # answer is still on its way would be handed back (by SetResult) at stop.
        async def every_answer_read() -> bool:
            return not worker._runs

        await assert_eventually(every_answer_read)
    assert await handled(harness, "SetResult") == 0
    assert await handled(harness, "ReportAndClaim") < len(ids)


async def test_a_result_finishing_during_a_long_poll_is_reported_at_once(
    harness: Harness,
) -> None:
    model = unique_model()
    release = threading.Event()

    def slow(ctx: JobContext) -> str:
        release.wait(10)
        return "ok"

    target = f"127.0.0.1:{harness.worker_port}"
    async with running_worker(target, model, slow, concurrency=2, claim_wait=30.0):
        [job_id] = await submit(harness, model, 1)

        async def running() -> bool:
            job = (await harness.job.Get(job_service_pb2.GetRequest(job_id=job_id))).job
            return job.status == job_pb2.JOB_STATUS_PROCESSING

        await assert_eventually(running)

        async def polling() -> bool:  # the free slot's long poll is open
            return harness.serving.lifecycle.in_flight >= 1

        await assert_eventually(polling)
        release.set()
        await all_completed(harness, [job_id])  # well before the 30 s poll ends


async def test_a_draining_worker_still_reports_its_last_results(harness: Harness) -> None:
    model = unique_model()
    started, release = threading.Event(), threading.Event()

    def held(ctx: JobContext) -> str:
        started.set()
        release.wait(10)
        return "ok"

    target = f"127.0.0.1:{harness.worker_port}"
    async with running_worker(target, model, held, concurrency=1) as worker:
        [job_id] = await submit(harness, model, 1)
        assert await asyncio.to_thread(started.wait, 10)
        worker.stop()  # stop claiming; the job in flight finishes and is reported
        release.set()
        await all_completed(harness, [job_id])


class NoFastPath(WorkerService):
    """A WorkerService from before ReportAndClaim."""

    async def ReportAndClaim(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")


async def test_a_server_without_the_fast_path_gets_claim_next_and_set_result(
    harness: Harness,
) -> None:
    servicer = NoFastPath(harness.serving)

    def add(server: grpc.aio.Server) -> None:
        worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)

    grpc_server, port = new_server(harness.serving, LOOPBACK, add, [SERVICE_NAME])
    await grpc_server.start()
    try:
        model = unique_model()
        ids = await submit(harness, model, 3)
        async with running_worker(f"127.0.0.1:{port}", model, noop) as worker:
            await all_completed(harness, ids)
            assert isinstance(worker.transport, Classic)
    finally:
        await grpc_server.stop(0)
    assert await handled(harness, "SetResult") == 3
