"""`jobgate worker --pool`: the daemon claims for its pool on every path it uses.

In-process servers over LocalStore in open mode, where a worker's pool is
taken as given: the daemon runs the jobs of its pool and the any-pool ones
and never another pool's, over the fast path and over the classic calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc.aio
import pytest

from jobgate import JobContext
from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2_grpc
from jobgate.worker._transport import Classic, FastPath
from serving.grpc_server import new_server
from tests.helpers import assert_eventually
from tests.servers.harness import LOOPBACK, Harness, start_harness
from tests.worker.conftest import running_worker, unique_model
from tests.worker.test_fast_path import NoFastPath
from worker_server.server import SERVICE_NAME


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    started = await start_harness()
    yield started
    await started.close()


async def submit(harness: Harness, model: str, pool: str) -> str:
    request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model, pool=pool))
    return (await harness.job.Submit(request, timeout=5)).job.id


async def status(harness: Harness, job_id: str) -> int:
    return (await harness.job.Get(job_service_pb2.GetRequest(job_id=job_id))).job.status


def noop(ctx: JobContext) -> bytes:
    return b"ok"


@contextlib.asynccontextmanager
async def worker_server(harness: Harness, transport: type) -> AsyncIterator[str]:
    """The harness's WorkerService, or one from before ReportAndClaim (classic calls)."""
    if transport is FastPath:
        yield f"127.0.0.1:{harness.worker_port}"
        return
    servicer = NoFastPath(harness.serving)

    def add(server: grpc.aio.Server) -> None:
        worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)

    grpc_server, port = new_server(harness.serving, LOOPBACK, add, [SERVICE_NAME])
    await grpc_server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await grpc_server.stop(None)


@pytest.mark.parametrize("transport", [FastPath, Classic])
async def test_a_pools_daemon_runs_its_pools_and_any_pool_jobs_never_anothers(
    harness: Harness, transport: type
) -> None:
    model = unique_model()
    mine = await submit(harness, model, "onprem")
    anywhere = await submit(harness, model, "")
    theirs = await submit(harness, model, "cloud")
    async with (
        worker_server(harness, transport) as target,
        running_worker(target, model, noop, pool="onprem") as worker,
    ):

        async def ran() -> bool:
            done = [await status(harness, job) for job in (mine, anywhere)]
            return done == [job_pb2.JOB_STATUS_COMPLETED] * 2

        await assert_eventually(ran)
        assert isinstance(worker.transport, transport)
    assert await status(harness, theirs) == job_pb2.JOB_STATUS_QUEUED
