"""Server settings: DESIGN's flags on every command, also from JOBGATE_<NAME>."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.api import Api, failure_of, fresh_name, tenant_metadata
from tests.e2e.harness import (
    FAST_SETTINGS,
    Deployment,
    ServerProcess,
    Token,
    embedded_deployment,
    redis_deployment,
    write_auth_file,
)
from tests.redis_server import RedisServer


@pytest.fixture(scope="module")
def env_configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("env")
    env = {"JOBGATE_MAX_PAYLOAD_BYTES": "100", "JOBGATE_MAX_ATTEMPTS": "7"}
    deployment = embedded_deployment(workdir, FAST_SETTINGS, env=env).start()
    yield deployment
    deployment.stop()


@pytest.fixture
async def env_api(env_configured: Deployment) -> AsyncIterator[Api]:
    job_channel = grpc.aio.insecure_channel(env_configured.job_target)
    worker_channel = grpc.aio.insecure_channel(env_configured.worker_target)
    yield Api(job_channel, worker_channel, tenant_metadata(fresh_name("t")))
    await job_channel.close(None)
    await worker_channel.close(None)


async def test_limits_are_read_from_the_environment(env_api: Api) -> None:
    failure = await failure_of(env_api.submit(fresh_name("m"), b"x" * 101))

    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert failure.names_field("payload"), failure


async def test_defaults_are_read_from_the_environment(env_api: Api) -> None:
    job = await env_api.submit(fresh_name("m"), b"x" * 100)

    assert job.max_attempts == 7


DESIGN_SETTINGS = {
    "lease-timeout": "2.5",
    "max-attempts": "4",
    "run-timeout": "60",
    "result-ttl": "120",
    "queue-timeout": "90",
    "max-payload-bytes": "2048",
    "max-group-children": "10",
    "max-live-per-tenant": "50",
    "max-live-total": "100",
    "retry-backoff": "0.2",
    "grace-period": "1",
    "log-format": "json",
    "log-level": "debug",
    "metrics-listen": "127.0.0.1:0",
}


@pytest.mark.redis
@pytest.mark.parametrize("command", ["gateway", "worker-server"])
def test_every_server_command_accepts_every_setting(
    command: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    auth = write_auth_file(tmp_path / "auth.json", [Token("secret", "acme", "client")])
    settings = {
        **DESIGN_SETTINGS,
        "redis-url": redis_server.url,
        "redis-partition": f"s{uuid.uuid4().hex[:10]}",
        # Not acted on by gateway or worker-server: accepted and ignored.
        "worker-listen": "127.0.0.1:0",
        "auth-file": str(auth.path),
    }
    process = ServerProcess(command, tmp_path / "log", settings)
    process.start()
    try:
        process.wait_serving()
    finally:
        assert process.terminate() == 0, process.log_tail()


@pytest.mark.redis
async def test_serve_with_a_redis_url_keeps_its_jobs_in_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    shared = {**FAST_SETTINGS, "redis-url": redis_server.url}
    shared["redis-partition"] = f"s{uuid.uuid4().hex[:10]}"
    serve = embedded_deployment(tmp_path / "serve", shared)
    gateway = redis_deployment(
        tmp_path / "gw", redis_server.url, shared["redis-partition"], FAST_SETTINGS
    )
    gateway.processes = [p for p in gateway.processes if p.name.startswith("gateway")]
    try:
        serve.start()
        gateway.start()
        tenant = tenant_metadata(fresh_name("t"))
        async with (
            grpc.aio.insecure_channel(serve.job_target) as serve_channel,
            grpc.aio.insecure_channel(gateway.job_target) as gateway_channel,
        ):
            through_serve = Api(serve_channel, serve_channel, tenant)
            through_gateway = Api(gateway_channel, gateway_channel, tenant)
            job = await through_serve.submit(fresh_name("m"))

            assert (await through_gateway.get(job.id)).id == job.id
    finally:
        serve.stop()
        gateway.stop()
