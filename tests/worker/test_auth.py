"""Credentials end to end: bearer tokens from the client and the daemon, per role."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobgate import ConnectionConfig, JobClient, JobNotFoundError, PermissionDeniedError
from jobgate.v1 import job_pb2
from jobgate.worker import Worker
from tests.e2e.harness import AuthFile, Deployment, Token, write_auth_file
from tests.worker.conftest import SERVER_SETTINGS, running_worker, started, worker_config

CLIENT_A = Token("client-a-secret", "acme", "client")
CLIENT_B = Token("client-b-secret", "globex", "client")
WORKER = Token("worker-secret", "fleet", "worker")


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> AuthFile:
    path = tmp_path_factory.mktemp("auth") / "tokens.json"
    return write_auth_file(path, [CLIENT_A, CLIENT_B, WORKER])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, auth: AuthFile) -> Iterator[Deployment]:
    settings = {**SERVER_SETTINGS, "auth-file": str(auth.path)}
    yield from started(tmp_path_factory.mktemp("secured"), settings)


async def test_a_worker_token_runs_the_jobs_a_client_token_submits(
    secured: Deployment, model: str
) -> None:
    config = ConnectionConfig(target=secured.worker_target, token=WORKER.secret)
    async with (
        JobClient(secured.job_target, token=CLIENT_A.secret) as client,
        running_worker(secured.worker_target, model, lambda ctx: ctx.payload, connection=config),
    ):
        job = await client.submit(model, b"payload")
        done = await client.wait_for_result(job.id, timeout=15)

    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert done.tenant == "acme"


async def test_another_tenants_token_cannot_see_the_job(secured: Deployment, model: str) -> None:
    async with JobClient(secured.job_target, token=CLIENT_A.secret) as owner:
        job = await owner.submit(model, b"x")
    async with JobClient(secured.job_target, token=CLIENT_B.secret) as stranger:
        with pytest.raises(JobNotFoundError):
            await stranger.get(job.id)


async def test_a_worker_token_may_not_submit(secured: Deployment, model: str) -> None:
    async with JobClient(secured.job_target, token=WORKER.secret) as client:
        with pytest.raises(PermissionDeniedError):
            await client.submit(model, b"x")


async def test_a_worker_daemon_with_a_client_token_exits_1(secured: Deployment, model: str) -> None:
    config = ConnectionConfig(target=secured.worker_target, token=CLIENT_A.secret)
    worker = Worker(worker_config(secured.worker_target, model, connection=config), print)

    assert await worker.run() == 1
