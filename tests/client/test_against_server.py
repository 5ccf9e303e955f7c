"""JobClient against a real `jobgate serve`: groups, idempotency, watch, cancel."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from jobgate import JobClient, SyncJobClient, job_spec
from jobgate.v1 import job_pb2, job_service_pb2
from tests.e2e.harness import Deployment
from tests.worker.conftest import SERVER_SETTINGS, running_worker, started, unique_model


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from started(tmp_path_factory.mktemp("serve"), SERVER_SETTINGS)


@pytest.fixture
def model() -> str:
    return unique_model()


async def test_a_group_runs_its_children_and_reports_them(server: Deployment, model: str) -> None:
    children = [job_spec(model, f"page {i}", labels={"page": str(i)}) for i in range(3)]
    async with (
        JobClient(server.job_target) as client,
        running_worker(server.worker_target, model, lambda ctx: ctx.payload.upper()),
    ):
        parent = await client.submit_group(children, max_parallel=1)
        done = await client.wait_for_result(parent.id, timeout=20)
        first_child = await client.get(done.children[0].id)

    assert done.kind == job_pb2.JOB_KIND_GROUP
    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert [child.status for child in done.children] == [job_pb2.JOB_STATUS_COMPLETED] * 3
    assert first_child.result == b"PAGE 0"


async def test_the_same_key_twice_returns_the_first_job(server: Deployment, model: str) -> None:
    request = job_service_pb2.SubmitRequest(
        idempotency_key=f"key-{uuid.uuid4().hex}", job=job_spec(model, b"x")
    )
    async with JobClient(server.job_target) as client:
        first = await client.submit_request(request)
        second = await client.submit_request(request)

    assert second.job.id == first.job.id
    assert (first.reused, second.reused) == (False, True)


async def test_watch_shows_the_queue_position_then_the_cancellation(
    server: Deployment, model: str
) -> None:
    async with JobClient(server.job_target) as client:
        ahead = await client.submit(model, b"first")
        job = await client.submit(model, b"second")
        snapshots = client.watch(job.id)
        queued = await anext(snapshots)
        await client.cancel(job.id, "not needed")
        rest = [snapshot async for snapshot in snapshots]
        await client.cancel(ahead.id)

    assert queued.status == job_pb2.JOB_STATUS_QUEUED
    assert queued.queue_position == 1
    assert rest[-1].status == job_pb2.JOB_STATUS_CANCELLED


async def test_the_sync_client_works_against_the_server(server: Deployment, model: str) -> None:
    def submit_and_cancel() -> job_pb2.Job:
        with SyncJobClient(server.job_target) as client:
            job = client.submit(model, b"x")
            client.cancel(job.id)
            return client.wait_for_result(job.id, timeout=10)

    done = await asyncio.to_thread(submit_and_cancel)

    assert done.status == job_pb2.JOB_STATUS_CANCELLED


async def test_batch_submit_against_the_server_reuses_keyed_items(
    server: Deployment, model: str
) -> None:
    key = f"key-{uuid.uuid4().hex}"
    batch = [
        job_service_pb2.SubmitRequest(idempotency_key=key, job=job_spec(model, b"x")),
        job_service_pb2.SubmitRequest(job=job_spec(model, b"y")),
    ]
    async with JobClient(server.job_target) as client:
        first = await client.batch_submit(batch)
        again = await client.batch_submit([batch[0]])

    assert [response.reused for response in first] == [False, False]
    assert again[0].reused
    assert again[0].job.id == first[0].job.id
