"""Restarting a stateless server loses nothing (DESIGN: both servers are stateless)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.api import COMPLETED, PROCESSING, QUEUED, Api, fresh_name
from tests.e2e.harness import FAST_SETTINGS, Deployment, redis_deployment, restart_process
from tests.redis_server import RedisServer

JOBS = 5
# Longer than a server restart takes on a loaded machine (a Python start-up
# alone can take 3 s there), so the in-flight lease outlives the restart
# whatever the load: these tests are about restarts, not expiry.
RESTART_LEASE = "30"


@pytest.fixture
def on_shared_redis(redis_server: RedisServer, tmp_path: Path) -> Iterator[Deployment]:
    """fault/conftest's on_shared_redis (and so shared_api), with a long lease."""
    settings = {**FAST_SETTINGS, "lease-timeout": RESTART_LEASE}
    partition = f"r{uuid.uuid4().hex[:10]}"
    deployment = redis_deployment(tmp_path / "servers", redis_server.url, partition, settings)
    deployment.start()
    yield deployment
    deployment.stop()


def process_named(deployment: Deployment, name: str) -> int:
    return next(i for i, p in enumerate(deployment.processes) if p.name == name)


async def test_gateway_restart_loses_nothing(shared_api: Api, on_shared_redis: Deployment) -> None:
    model = fresh_name("m")
    jobs = [await shared_api.submit(model, str(i).encode()) for i in range(JOBS)]
    in_flight = await shared_api.claim_one(model)
    gateway = on_shared_redis.processes[process_named(on_shared_redis, "gateway-0")]

    assert gateway.terminate() == 0
    restart_process(gateway)

    statuses = [(await shared_api.get(job.id)).status for job in jobs]
    assert statuses == [PROCESSING] + [QUEUED] * (JOBS - 1)
    await shared_api.complete(in_flight.job.id, in_flight.lease_id)
    for _ in range(JOBS - 1):
        await shared_api.run_to_completion(model)
    final = await asyncio.gather(*(shared_api.get(job.id) for job in jobs))
    assert [job.status for job in final] == [COMPLETED] * JOBS


async def test_worker_server_restart_keeps_leases(
    shared_api: Api, on_shared_redis: Deployment
) -> None:
    model = fresh_name("m")
    job = await shared_api.submit(model)
    claimed = await shared_api.claim_one(model)
    worker_server = on_shared_redis.processes[process_named(on_shared_redis, "worker-server-0")]

    assert worker_server.terminate() == 0
    restart_process(worker_server)

    assert not (await shared_api.heartbeat(job.id, claimed.lease_id, 0.5)).cancel_requested
    assert (await shared_api.complete(job.id, claimed.lease_id)).status == COMPLETED
