"""`jobgate serve --data-dir` on a full disk: Submit is refused RESOURCE_EXHAUSTED
(QUEUE_FULL) with nothing half-written, and the reserve lets 1,000 Heartbeats,
SetResults and Cancels through after that; a restart finds every one of them.

The disk is the serve process's file-size limit (RLIMIT_FSIZE, `ulimit -f`,
set on the running process with prlimit(2)): past it a write fails as on a
full disk, and the journal counts it as the disk's end when it measures the
room left (store/journal/writer.py `room`). The limit is the default reserve
plus a few MiB, so Submit is refused within a few hundred jobs.
"""

from __future__ import annotations

import asyncio
import resource
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from jobgate.v1 import job_service_pb2
from store.journal import DB_NAME, DEFAULT_RESERVE
from tests.e2e.api import CANCELLED, COMPLETED, QUEUED, Api, Failure, failure_of, fresh_name, spec
from tests.e2e.harness import FAST_SETTINGS, Deployment, embedded_deployment
from tests.faults.test_durable_serve import api_of

#: What the file may hold beyond the reserve before Submit is refused.
ROOM_FOR_JOBS = 8 * 1024 * 1024
FILE_SIZE_LIMIT = DEFAULT_RESERVE + ROOM_FOR_JOBS
ROUNDS_AFTER_FULL = 1000
FILL_PAYLOAD = b"f" * 64 * 1024
CONCURRENT = 50  # calls in flight at a time (they share commits)
BATCH = 100


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def serve(tmp_path: Path, data_dir: Path) -> Iterator[Deployment]:
    # Leases outlive the test on a loaded machine; the default --data-sync full.
    settings = {**FAST_SETTINGS, "lease-timeout": "120", "data-dir": str(data_dir)}
    deployment = embedded_deployment(tmp_path / "servers", settings).start()
    yield deployment
    deployment.stop()


@pytest.fixture
async def api(serve: Deployment) -> AsyncIterator[Api]:
    async with api_of(serve) as opened:
        yield opened


def limit_file_size(deployment: Deployment, limit: int) -> None:
    process = deployment.processes[0].process
    assert process is not None
    resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (limit, limit))


def records_in_file(data_dir: Path) -> int:
    """How many jobs the file holds (committed), read as `jobgate events` reads it."""
    con = sqlite3.connect(f"file:{data_dir / DB_NAME}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT count(*) FROM records").fetchone()[0])
    finally:
        con.close()


async def in_chunks(calls: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run the calls CONCURRENT at a time; their answers in order."""
    answers: list[Any] = []
    for start in range(0, len(calls), CONCURRENT):
        answers += await asyncio.gather(*(call() for call in calls[start : start + CONCURRENT]))
    return answers


async def submit_many(api: Api, model: str, count: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, BATCH):
        requests = [
            job_service_pb2.SubmitRequest(job=spec(model, b"small"))
            for _ in range(min(BATCH, count - start))
        ]
        ids += [answer.job.id for answer in await api.batch_submit(*requests)]
    return ids


async def claim_all(api: Api, model: str, count: int) -> dict[str, str]:
    """Job id -> lease id of `count` jobs of `model`."""
    leases: dict[str, str] = {}
    while len(leases) < count:
        for item in await api.claim([model], max_jobs=min(64, count - len(leases))):
            leases[item.job.id] = item.lease_id
    return leases


async def fill_until_refused(api: Api, model: str) -> tuple[list[str], Failure]:
    """Submit 64 KiB jobs one at a time until one is refused: the acknowledged ids and
    the refusal."""
    acknowledged: list[str] = []
    for _ in range(10 * FILE_SIZE_LIMIT // len(FILL_PAYLOAD)):
        try:
            acknowledged.append((await api.submit(model, FILL_PAYLOAD)).id)
        except grpc.aio.AioRpcError:
            return acknowledged, await failure_of(api.submit(model, FILL_PAYLOAD))
    raise AssertionError("the disk never filled")


def refused_for_a_full_disk(failure: Failure) -> bool:
    return failure.code == grpc.StatusCode.RESOURCE_EXHAUSTED and failure.reason == "QUEUE_FULL"


async def test_a_full_disk_refuses_submit_writes_nothing_half_and_the_reserve_lets_updates_pass(
    serve: Deployment, api: Api, data_dir: Path
) -> None:
    run_model, wait_model, fill_model = fresh_name("run"), fresh_name("wait"), fresh_name("fill")
    running = await submit_many(api, run_model, ROUNDS_AFTER_FULL)
    waiting = await submit_many(api, wait_model, ROUNDS_AFTER_FULL)
    leases = await claim_all(api, run_model, ROUNDS_AFTER_FULL)
    limit_file_size(serve, FILE_SIZE_LIMIT)

    filled, refusal = await fill_until_refused(api, fill_model)
    held = records_in_file(data_dir)
    # Items of the refused job's size: ten small ones may still fit in what was
    # left below one 64 KiB job (the refusal leaves that much room unknown).
    batch = [job_service_pb2.SubmitRequest(job=spec(fill_model, FILL_PAYLOAD)) for _ in range(10)]
    batch_refusal = await failure_of(api.batch_submit(*batch))

    assert filled, "the disk was full before the first 64 KiB job"
    assert refused_for_a_full_disk(refusal), refusal
    assert refused_for_a_full_disk(batch_refusal), batch_refusal
    assert held == records_in_file(data_dir) == 2 * ROUNDS_AFTER_FULL + len(filled)

    heartbeats = await in_chunks(
        [partial(api.heartbeat, j, leases[j], 0.5, "late") for j in running]
    )
    results = await in_chunks([partial(api.complete, j, leases[j], b"r" * 64) for j in running])
    cancels = await in_chunks([partial(api.cancel, j) for j in waiting])

    assert not any(answer.cancel_requested for answer in heartbeats)
    assert all(job.status == COMPLETED for job in results)
    assert all(answer.cancelled for answer in cancels)
    assert refused_for_a_full_disk(await failure_of(api.submit(fill_model, b"x")))

    serve.stop()
    serve.start()  # without the limit: what the file holds
    async with api_of(serve) as again:
        statuses = {
            status: [(await again.get(job_id)).status for job_id in ids]
            for status, ids in ((COMPLETED, running), (CANCELLED, waiting), (QUEUED, filled))
        }
    assert records_in_file(data_dir) == 2 * ROUNDS_AFTER_FULL + len(filled)
    for status, found in statuses.items():
        assert set(found) == {status}
