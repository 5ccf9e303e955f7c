"""Fixtures: a real `jobgate serve` (embedded store) and an in-process worker daemon."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jobgate import ConnectionConfig, JobClient, RetryPolicy
from jobgate.worker import Worker, WorkerConfig
from jobgate.worker._job import Handler
from tests.e2e.harness import Deployment, embedded_deployment

# A short lease so that "heartbeats keep it alive" shows within a couple of seconds.
LEASE_SECONDS = 2.0
SERVER_SETTINGS = {
    "lease-timeout": str(LEASE_SECONDS),
    "retry-backoff": "0.1",
    "grace-period": "1",
    "metrics-listen": "off",
}


def started(workdir: Path, settings: dict[str, str]) -> Generator[Deployment, None, None]:
    """A running `jobgate serve` with `settings`, stopped when the generator closes."""
    deployment = embedded_deployment(workdir, settings)
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()


def unique_model() -> str:
    """A model name no other test uses, so no other worker claims this test's jobs."""
    return f"m-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One `jobgate serve` per test module; tests keep apart by model name."""
    yield from started(tmp_path_factory.mktemp("serve"), SERVER_SETTINGS)


@pytest.fixture
def model() -> str:
    return unique_model()


@pytest.fixture
async def client(server: Deployment) -> AsyncIterator[JobClient]:
    policy = RetryPolicy(max_attempts=20, initial_backoff=0.05, max_backoff=0.5)
    async with JobClient(server.job_target, retry=policy, timeout=10.0) as job_client:
        yield job_client


def worker_config(target: str, model: str, **overrides: Any) -> WorkerConfig:
    config = WorkerConfig(
        models=(model,),
        connection=ConnectionConfig(target=target),
        worker_id=f"test-{uuid.uuid4().hex[:6]}",
        claim_wait=2.0,
        progress_interval=0.05,
        grace_period=5.0,
    )
    return replace(config, **overrides)


@asynccontextmanager
async def running_worker(
    target: str, model: str, handler: Handler, **overrides: Any
) -> AsyncIterator[Worker]:
    """A Worker on this test's event loop, stopped (without grace) at the end."""
    worker = Worker(worker_config(target, model, **overrides), handler)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        worker.stop()  # second stop: do not wait out the grace period
        await asyncio.wait_for(task, 10)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]
