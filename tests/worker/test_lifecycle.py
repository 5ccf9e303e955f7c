"""The daemon's lifecycle: SIGTERM drains, and a worker-server restart loses nothing."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobgate import JobClient, JobContext
from jobgate.v1 import job_pb2
from tests.e2e.harness import (
    Deployment,
    redis_deployment,
    restart_process,
    server_environment,
)
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.worker.conftest import running_worker

REPO_ROOT = Path(__file__).resolve().parents[2]


def start_worker_process(
    target: str, model: str, handler: str, log: Path
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "jobgate.cli", "worker",
        "--target", target, "--model", model, "--handler", handler,
        "--claim-wait", "2", "--grace-period", "10",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=server_environment()
        )


async def test_sigterm_finishes_the_job_in_hand_claims_nothing_more_and_exits_0(
    server: Deployment, client: JobClient, model: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker_process(server.worker_target, model, "tests.worker.handlers:slow", log)
    try:
        running = await client.submit(model, b"x", labels={"seconds": "1.5"})

        async def in_the_handler() -> bool:
            # The handler's own report, not just PROCESSING: a job claimed while
            # the ClaimNext answer is still on its way is abandoned by the stop.
            return (await client.get(running.id)).stage == "working"

        await assert_eventually(in_the_handler, timeout=20)  # a loaded start-up
        waiting = await client.submit(model, b"y")
        worker.send_signal(signal.SIGTERM)
        exit_code = await asyncio.to_thread(worker.wait, 15)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    assert exit_code == 0, log.read_text()
    done = await client.get(running.id)
    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert done.result == b"slept 1.5"
    left = await client.get(waiting.id)
    assert left.status == job_pb2.JOB_STATUS_QUEUED
    assert left.attempts == 0


@pytest.fixture
def redis_servers(redis_server: RedisServer, tmp_path: Path) -> Iterator[Deployment]:
    """gateway + worker-server on Redis, with a lease longer than a restart takes."""
    settings = {
        "lease-timeout": "6",
        "retry-backoff": "0.1",
        "grace-period": "1",
        "metrics-listen": "off",
    }
    partition = f"w{uuid.uuid4().hex[:10]}"
    deployment = redis_deployment(tmp_path / "servers", redis_server.url, partition, settings)
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()


@pytest.mark.redis
async def test_a_held_job_survives_a_worker_server_restart_and_its_result_lands(
    redis_servers: Deployment, model: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobgate.worker")
    started, release = threading.Event(), threading.Event()

    def held(ctx: JobContext) -> str:
        started.set()
        release.wait(20)
        return f"finished attempt {ctx.attempt}"

    worker_server = next(p for p in redis_servers.processes if p.name.startswith("worker"))
    async with (
        JobClient(redis_servers.job_target) as client,
        running_worker(redis_servers.worker_target, model, held) as worker,
    ):
        job = await client.submit(model, b"x")
        assert await asyncio.to_thread(started.wait, 10)

        await asyncio.to_thread(worker_server.terminate)
        release.set()  # the result is ready while the worker server is down
        await asyncio.to_thread(restart_process, worker_server)
        done = await client.wait_for_result(job.id, timeout=20)

        async def acknowledged() -> bool:
            # The stream can show COMPLETED before the worker reads the answer
            # to its SetResult; stopping it then would cut that short.
            return not worker.active

        await assert_eventually(acknowledged)

    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert done.result == b"finished attempt 1"
    assert done.attempts == 1
    assert "reachable again" in caplog.text
