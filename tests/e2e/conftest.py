"""End-to-end fixtures: real server processes on loopback, in both topologies.

`deployment` is parametrized over "embedded" (`jobgate serve`) and "redis"
(`jobgate gateway` + `jobgate worker-server` on the session redis-server).
Deployments are session-scoped to bound the number of start-ups; tests stay
independent by using their own tenant and model names, and on Redis each
deployment has its own partition.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from tests.e2e.api import Api, Metadata, fresh_name, tenant_metadata
from tests.e2e.harness import (
    FAST_SETTINGS,
    Deployment,
    Token,
    attach_server_logs,
    embedded_deployment,
    redis_deployment,
    write_auth_file,
)
from tests.redis_server import RedisServer

TOPOLOGIES = ["embedded", pytest.param("redis", marks=pytest.mark.redis)]
# The shared deployment also runs on three partitions (--redis-partitions 3).
DEPLOYMENT_TOPOLOGIES = [*TOPOLOGIES, pytest.param("redis3", marks=pytest.mark.redis)]

# Admission caps small enough to reach in a test.
CAPS: Mapping[str, str] = {
    "max-live-per-tenant": "5",
    "max-live-total": "8",
    "max-group-children": "3",
    "max-payload-bytes": "1024",
}

AUTH_TENANTS = ("acme", "globex")
#: The tenant of the auth deployment's admin token (every tenant's jobs).
ADMIN_TENANT = "ops"


def start_deployment(
    request: pytest.FixtureRequest,
    workdir: Path,
    settings: Mapping[str, str],
) -> Deployment:
    if request.param == "embedded":
        return embedded_deployment(workdir, settings).start()
    redis: RedisServer = request.getfixturevalue("redis_server")
    partition = f"e2e{uuid.uuid4().hex[:10]}"
    if request.param == "redis3":
        settings = {**settings, "redis-partitions": "3"}
    return redis_deployment(workdir, redis.url, partition, settings).start()


@pytest.fixture(scope="session", params=DEPLOYMENT_TOPOLOGIES)
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """The shared deployment with fast timings and default caps, open mode."""
    workdir = tmp_path_factory.mktemp(f"deploy-{request.param}")
    running = start_deployment(request, workdir, FAST_SETTINGS)
    yield running
    running.stop()


@pytest.fixture(scope="session", params=TOPOLOGIES)
def caps_deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A deployment with tiny admission caps (see CAPS)."""
    workdir = tmp_path_factory.mktemp(f"caps-{request.param}")
    running = start_deployment(request, workdir, {**FAST_SETTINGS, **CAPS})
    yield running
    running.stop()


@pytest.fixture(scope="session", params=TOPOLOGIES)
def ttl_deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A deployment whose finished jobs expire after one second (--result-ttl 1)."""
    workdir = tmp_path_factory.mktemp(f"ttl-{request.param}")
    running = start_deployment(request, workdir, {**FAST_SETTINGS, "result-ttl": "1"})
    yield running
    running.stop()


@pytest.fixture
async def ttl_api(ttl_deployment: Deployment, tenant: str) -> AsyncIterator[Api]:
    async with api_factory(ttl_deployment) as make:
        yield make(tenant_metadata(tenant), ())


@pytest.fixture(scope="session", params=TOPOLOGIES)
def auth_deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A deployment with --auth-file: client tokens for AUTH_TENANTS, one worker token
    and one admin token (of ADMIN_TENANT)."""
    workdir = tmp_path_factory.mktemp(f"auth-{request.param}")
    tokens = [Token(f"client-secret-{t}-{uuid.uuid4().hex}", t, "client") for t in AUTH_TENANTS]
    tokens.append(Token(f"worker-secret-{uuid.uuid4().hex}", "fleet", "worker"))
    tokens.append(Token(f"admin-secret-{uuid.uuid4().hex}", ADMIN_TENANT, "admin"))
    auth = write_auth_file(workdir / "auth.json", tokens)
    running = start_deployment(request, workdir, {**FAST_SETTINGS, "auth-file": str(auth.path)})
    running.auth = auth
    yield running
    running.stop()


@asynccontextmanager
async def channels(deployment: Deployment) -> AsyncIterator[tuple[grpc.aio.Channel, ...]]:
    job_channel = grpc.aio.insecure_channel(deployment.job_target)
    worker_channel = grpc.aio.insecure_channel(deployment.worker_target)
    try:
        yield job_channel, worker_channel
    finally:
        await job_channel.close(None)
        await worker_channel.close(None)


ApiFactory = Callable[[Metadata, Metadata], Api]


@asynccontextmanager
async def api_factory(deployment: Deployment) -> AsyncIterator[ApiFactory]:
    """Build Api objects (one per identity) sharing one pair of channels."""
    async with channels(deployment) as (job_channel, worker_channel):

        def make(client_metadata: Metadata, worker_metadata: Metadata) -> Api:
            return Api(job_channel, worker_channel, client_metadata, worker_metadata)

        yield make


@pytest.fixture
async def apis(deployment: Deployment) -> AsyncIterator[ApiFactory]:
    async with api_factory(deployment) as make:
        yield make


@pytest.fixture
def tenant() -> str:
    return fresh_name("tenant")


@pytest.fixture
def model() -> str:
    return fresh_name("m")


@pytest.fixture
def api(apis: ApiFactory, tenant: str) -> Api:
    """One fresh tenant (open mode) on the shared deployment, with its own worker id."""
    return apis(tenant_metadata(tenant), ())


@pytest.fixture
async def caps_apis(caps_deployment: Deployment) -> AsyncIterator[ApiFactory]:
    """Api objects on the caps deployment; every job they submitted is cancelled afterwards
    so the shared total cap is free for the next test."""
    async with api_factory(caps_deployment) as make:
        made: list[Api] = []

        def tracked(client_metadata: Metadata, worker_metadata: Metadata) -> Api:
            api = make(client_metadata, worker_metadata)
            made.append(api)
            return api

        yield tracked
        for api in made:
            await api.cancel_all()


@pytest.fixture
async def auth_apis(auth_deployment: Deployment) -> AsyncIterator[ApiFactory]:
    async with api_factory(auth_deployment) as make:
        yield make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, attach the servers' logs to the report."""
    outcome = yield
    attach_server_logs(item, outcome.get_result())  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the measured dispatch latencies (visible in CI logs without -s)."""
    from tests.e2e.test_dispatch_latency import RESULTS

    for topology, figure in sorted(RESULTS.items()):
        terminalreporter.write_line(f"dispatch latency ({topology}): {figure}")
