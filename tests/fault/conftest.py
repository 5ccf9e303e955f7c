"""Fault fixtures: deployments of a test's own, which the test may stop, restart or cut off."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.api import Api, fresh_name, tenant_metadata
from tests.e2e.harness import (
    FAST_SETTINGS,
    Deployment,
    attach_server_logs,
    embedded_deployment,
    redis_deployment,
)
from tests.redis_server import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def on_own_redis(own_redis: RedisServer, tmp_path: Path) -> Iterator[Deployment]:
    """Gateway + worker-server on this test's own redis-server (AOF on), which it may stop."""
    deployment = redis_deployment(
        tmp_path / "servers", own_redis.url, "fault", FAST_SETTINGS
    ).start()
    yield deployment
    deployment.stop()


@pytest.fixture
def on_shared_redis(redis_server: RedisServer, tmp_path: Path) -> Iterator[Deployment]:
    """Gateway + worker-server of this test's own on the session Redis (fresh partition)."""
    partition = f"f{uuid.uuid4().hex[:10]}"
    deployment = redis_deployment(
        tmp_path / "servers", redis_server.url, partition, FAST_SETTINGS
    ).start()
    yield deployment
    deployment.stop()


async def open_api(deployment: Deployment) -> tuple[Api, list[grpc.aio.Channel]]:
    job_channel = grpc.aio.insecure_channel(deployment.job_target)
    worker_channel = grpc.aio.insecure_channel(deployment.worker_target)
    api = Api(job_channel, worker_channel, tenant_metadata(fresh_name("t")))
    return api, [job_channel, worker_channel]


@pytest.fixture
async def own_api(on_own_redis: Deployment) -> AsyncIterator[Api]:
    api, channels = await open_api(on_own_redis)
    yield api
    for channel in channels:
        await channel.close(None)


@pytest.fixture
async def shared_api(on_shared_redis: Deployment) -> AsyncIterator[Api]:
    api, channels = await open_api(on_shared_redis)
    yield api
    for channel in channels:
        await channel.close(None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, attach the servers' logs to the report."""
    outcome = yield
    attach_server_logs(item, outcome.get_result())  # type: ignore[attr-defined]


@pytest.fixture
def embedded_alone(tmp_path: Path) -> Iterator[Deployment]:
    """`jobgate serve` of this test's own, to signal."""
    deployment = embedded_deployment(tmp_path / "serve", FAST_SETTINGS).start()
    yield deployment
    deployment.stop()


@pytest.fixture
async def embedded_api(embedded_alone: Deployment) -> AsyncIterator[Api]:
    api, channels = await open_api(embedded_alone)
    yield api
    for channel in channels:
        await channel.close(None)
