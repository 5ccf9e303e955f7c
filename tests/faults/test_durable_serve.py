"""`jobgate serve --data-dir`: a kill -9 loses nothing acknowledged (under either
--data-sync: a process crash, not a power loss), its restart time is recorded; one
process per directory; a corrupt or newer file is refused at start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import pytest

from store.journal import DB_NAME, SCHEMA_VERSION
from tests.e2e.api import COMPLETED, PROCESSING, QUEUED, Api, fresh_name, tenant_metadata
from tests.e2e.harness import FAST_SETTINGS, Deployment, embedded_deployment, run_to_exit
from tests.faults.rig import Figures
from tests.launcher import REPO_ROOT

SUBMITTERS = 8
ACKNOWLEDGED_BEFORE_KILL = 200
# Longer than a restart on a loaded machine, so the in-flight lease outlives it.
RESTART_LEASE = "30"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def durable_deployment(tmp_path: Path, data_dir: Path, sync: str = "full") -> Deployment:
    settings = {
        **FAST_SETTINGS,
        "lease-timeout": RESTART_LEASE,
        "data-dir": str(data_dir),
        "data-sync": sync,
    }
    return embedded_deployment(tmp_path / "servers", settings).start()


@pytest.fixture
def durable(tmp_path: Path, data_dir: Path) -> Iterator[Deployment]:
    deployment = durable_deployment(tmp_path, data_dir)
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


async def _restart_and_get(deployment: Deployment, job_id: str) -> float:
    """Start the killed serve again; seconds from the start of the process to the
    first answered Get (its load of the directory included)."""
    started = time.monotonic()
    await asyncio.to_thread(deployment.processes[0].restart)
    async with api_of(deployment) as api:
        await api.get(job_id)
    return time.monotonic() - started


@pytest.mark.parametrize("sync", ["full", "normal"])
async def test_every_acknowledged_submit_survives_a_kill_9(
    tmp_path: Path, data_dir: Path, sync: str, figures: Callable[[Figures], None]
) -> None:
    deployment = durable_deployment(tmp_path, data_dir, sync)
    try:
        model = fresh_name("m")
        acknowledged = await _kill_under_load(deployment, model)

        restart = await _restart_and_get(deployment, acknowledged[0])
        async with api_of(deployment) as api:
            found = {}
            for job_id in acknowledged:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    found[job_id] = await api.get(job_id)
    finally:
        deployment.stop()

    lost = [job_id for job_id in acknowledged if job_id not in found]
    figures(
        Figures(
            f"serve --data-dir kill -9 under {SUBMITTERS} submitters, --data-sync {sync}",
            jobs=len(acknowledged),
            faults=1,
            lost=len(lost),
            notes={"restart_to_first_get_s": round(restart, 2)},
        )
    )
    assert lost == []
    assert all(job.status == QUEUED for job in found.values())


@pytest.fixture(params=["full", "normal"])
def durable_either(
    request: pytest.FixtureRequest, tmp_path: Path, data_dir: Path
) -> Iterator[Deployment]:
    """A durable serve under each --data-sync (normal: its commit log, replayed at start)."""
    deployment = durable_deployment(tmp_path, data_dir, request.param)
    yield deployment
    deployment.stop()


async def test_leases_results_and_keys_survive_a_kill_9(durable_either: Deployment) -> None:
    durable = durable_either
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


def _garble(path: Path, offset: int, length: int = 64) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(b"\xa5" * length)


async def _stopped_directory_with_jobs(durable: Deployment) -> None:
    """Submit a few jobs, then stop serve cleanly (the WAL checkpointed into the file)."""
    async with api_of(durable) as api:
        for _ in range(20):
            await api.submit(fresh_name("m"), b"p" * 2000)
    durable.stop()


def _records_root_page(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (root,) = con.execute(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'records'"
        ).fetchone()
        (page_size,) = con.execute("PRAGMA page_size").fetchone()
    finally:
        con.close()
    return (int(root) - 1) * int(page_size)


@pytest.mark.parametrize(
    ("where", "damage"),
    [
        ("the header", lambda path: _garble(path, 0, 16)),
        ("a page of the records", lambda path: _garble(path, _records_root_page(path), 4096)),
        ("a torn end", lambda path: path.write_bytes(path.read_bytes()[:-1000])),
    ],
)
async def test_serve_refuses_a_corrupt_data_file_and_says_so(
    durable: Deployment, data_dir: Path, where: str, damage: Callable[[Path], None]
) -> None:
    await _stopped_directory_with_jobs(durable)
    path = data_dir / DB_NAME
    damage(path)

    code, output = run_to_exit("serve", {"data-dir": str(data_dir)})

    assert code == 1, output
    assert f"{path} is corrupt" in output, output
    assert "does not start on it" in output
    assert "Traceback" not in output


async def test_serve_refuses_a_data_file_from_a_newer_schema(
    durable: Deployment, data_dir: Path
) -> None:
    await _stopped_directory_with_jobs(durable)
    con = sqlite3.connect(data_dir / DB_NAME)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()

    code, output = run_to_exit("serve", {"data-dir": str(data_dir)})

    assert code == 1, output
    assert "written by a newer jobgate" in output, output
    assert "Traceback" not in output
