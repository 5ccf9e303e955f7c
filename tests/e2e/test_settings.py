"""Server settings also come from JOBGATE_<NAME> (team decision on DESIGN's flags)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from tests.e2e.api import Api, failure_of, fresh_name, tenant_metadata
from tests.e2e.harness import FAST_SETTINGS, Deployment, embedded_deployment


@pytest.fixture(scope="module")
def env_configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    deployment = embedded_deployment(
        tmp_path_factory.mktemp("env"),
        FAST_SETTINGS,
        env={"JOBGATE_MAX_PAYLOAD_BYTES": "100", "JOBGATE_MAX_ATTEMPTS": "7"},
    )
    try:
        deployment.start()
        yield deployment
    finally:
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
