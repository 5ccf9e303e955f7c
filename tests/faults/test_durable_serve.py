"""`jobgate serve --data-dir`: a kill -9 loses nothing acknowledged; one process per directory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.api import COMPLETED, PROCESSING, QUEUED, Api, fresh_name, tenant_metadata
from tests.e2e.harness import FAST_SETTINGS, Deployment, embedded_deployment, run_to_exit
from tests.launcher import REPO_ROOT

SUBMITTERS = 8
ACKNOWLEDGED_BEFORE_KILL = 200
# Longer than a restart on a loaded machine, so the in-flight lease outlives it.
RESTART_LEASE = "30"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def durable(tmp_path: Path, data_dir: Path) -> Iterator[Deployment]:
    settings = {**FAST_SETTINGS, "lease-timeout": RESTART_LEASE, "data-dir": str(data_dir)}
    deployment = embedded_deployment(tmp_path / "servers", settings).start()
    yield deployment
    deployment.stop()


@contextlib.asynccontextmanager
async def api_of(deployment: Deployment) -> AsyncIterator[Api]:
    job_channel = grpc.aio.insecure_channel(deployment.job_target)
    worker_channel = grpc.aio.insecure_channel(deployment.worker_target)
    try:
        yield Api(job_channel, worker_channel, tenant_metadata("acme"))
    finally:
        await job_channel.close(None)
        await worker_channel.close(None)


async def _submit_until_refused(api: Api, model: str, acknowledged: list[str]) -> None:
    """Submit one job after another; record each acknowledged id; stop at the first error."""
    while True:
        try:
            job = await api.submit(model, f"payload {len(acknowledged)}".encode())
        except grpc.aio.AioRpcError:
            return
        acknowledged.append(job.id)


async def _kill_under_load(deployment: Deployment, model: str) -> list[str]:
    """Kill -9 `serve` while submitters are mid-call; the ids it acknowledged."""
    acknowledged: list[str] = []
    async with api_of(deployment) as api:
        submitters = [
            asyncio.create_task(_submit_until_refused(api, model, acknowledged))
            for _ in range(SUBMITTERS)
        ]
        while len(acknowledged) < ACKNOWLEDGED_BEFORE_KILL:
            done, _ = await asyncio.wait(submitters, timeout=0.05)
            assert not done, "a submitter stopped before the kill"
        deployment.processes[0].kill()
        await asyncio.gather(*submitters)
    return acknowledged


async def test_every_acknowledged_submit_survives_a_kill_9(durable: Deployment) -> None:
    model = fresh_name("m")
    acknowledged = await _kill_under_load(durable, model)

    durable.processes[0].restart()
    async with api_of(durable) as api:
        found = [await api.get(job_id) for job_id in acknowledged]

    assert [job.id for job in found] == acknowledged
    assert all(job.status == QUEUED for job in found)


async def test_leases_results_and_keys_survive_a_kill_9(durable: Deployment) -> None:
    model = fresh_name("m")
    async with api_of(durable) as api:
        done = await api.submit(model, b"first", key="order-1")
        running = await api.submit(model, b"second")
        waiting = await api.submit(model, b"third")
        finished = await api.run_to_completion(model, b"the result")
        in_flight = await api.claim_one(model)
    durable.processes[0].kill()

    durable.processes[0].restart()
    async with api_of(durable) as api:
        again = await api.submit(model, b"first", key="order-1")
        statuses = [(await api.get(job.id)).status for job in (done, running, waiting)]
        result = (await api.get(done.id)).result
        assert (await api.complete(running.id, in_flight.lease_id)).status == COMPLETED
        last = await api.claim_one(model)

    assert finished.id == done.id and again.id == done.id
    assert statuses == [COMPLETED, PROCESSING, QUEUED]
    assert result == b"the result"
    assert last.job.id == waiting.id and last.payload == b"third"


async def test_jobgate_events_reads_the_directory_while_serve_runs(
    durable: Deployment, data_dir: Path
) -> None:
    model = fresh_name("m")
    async with api_of(durable) as api:
        job = await api.submit(model)

    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "jobgate.cli", "events", "--json", "--data-dir", str(data_dir)],
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()

    assert process.returncode == 0
    assert [json.loads(line)["job_id"] for line in out.decode().splitlines()] == [job.id]


def test_a_second_serve_on_the_same_directory_refuses_to_start(
    durable: Deployment, data_dir: Path
) -> None:
    code, output = run_to_exit("serve", {"data-dir": str(data_dir)})

    assert code == 1
    assert str(data_dir) in output and "in use" in output
    assert f"pid {durable.processes[0].process.pid}" in output  # type: ignore[union-attr]


def test_serve_on_a_data_dir_that_is_a_file_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")

    code, output = run_to_exit("serve", {"data-dir": str(path)})

    assert code == 1
    assert "is a file, not a directory" in output


def test_serve_says_where_its_store_is_kept(durable: Deployment, data_dir: Path) -> None:
    output = durable.processes[0].output()
    assert "the embedded store is kept on disk" in output
    assert f"data_dir={data_dir} data_sync=full" in output


def test_serve_without_a_data_dir_says_its_store_is_in_memory(tmp_path: Path) -> None:
    deployment = embedded_deployment(tmp_path, FAST_SETTINGS).start()
    deployment.stop()

    assert "the embedded store is in memory" in deployment.processes[0].output()
