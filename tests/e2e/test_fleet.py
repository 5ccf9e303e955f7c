"""The fleet through real servers: ListWorkers, ListQueues, and KEDA's scaler on the gateway.

On Redis the worker registry is written by the worker-server process and
read by the gateway process: the sightings cross processes through the store.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from jobgate.keda import externalscaler_pb2 as keda
from jobgate.keda import externalscaler_pb2_grpc
from jobgate.v1 import job_pb2, job_service_pb2
from tests.e2e.api import Api, Metadata, failure_of, fresh_name, tenant_metadata
from tests.e2e.conftest import TOPOLOGIES, ApiFactory, api_factory, start_deployment
from tests.e2e.harness import FAST_SETTINGS, AuthFile, Deployment, Token, write_auth_file
from tests.helpers import assert_eventually


@pytest.fixture(scope="module", params=TOPOLOGIES)
def fleet_deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """--auth-file with a client, an admin and a worker token."""
    workdir = tmp_path_factory.mktemp(f"fleet-{request.param}")
    secret = uuid.uuid4().hex
    tokens = [
        Token(f"client-{secret}", "acme", "client"),
        Token(f"admin-{secret}", "ops", "admin"),
        Token(f"worker-{secret}", "fleet", "worker"),
    ]
    auth = write_auth_file(workdir / "auth.json", tokens)
    running = start_deployment(request, workdir, {**FAST_SETTINGS, "auth-file": str(auth.path)})
    running.auth = auth
    yield running
    running.stop()


def token(deployment: Deployment, role: str) -> Metadata:
    auth: AuthFile | None = deployment.auth
    assert auth is not None
    return next(t for t in auth.tokens if t.role == role).metadata


@pytest.fixture
async def fleet(fleet_deployment: Deployment) -> AsyncIterator[ApiFactory]:
    async with api_factory(fleet_deployment) as make:
        yield make


def as_role(fleet: ApiFactory, deployment: Deployment, role: str) -> Api:
    return fleet(token(deployment, role), token(deployment, "worker"))


async def workers(api: Api) -> list[job_pb2.Worker]:
    request = job_service_pb2.ListWorkersRequest()
    response = await api.jobs.ListWorkers(request, metadata=api.client_metadata, timeout=10)
    return list(response.workers)


async def queues(api: Api) -> list[job_pb2.QueueStats]:
    request = job_service_pb2.ListQueuesRequest()
    response = await api.jobs.ListQueues(request, metadata=api.client_metadata, timeout=10)
    return list(response.queues)


async def test_a_claiming_worker_is_listed_with_the_job_it_holds(
    fleet: ApiFactory, fleet_deployment: Deployment
) -> None:
    admin = as_role(fleet, fleet_deployment, "admin")
    client = as_role(fleet, fleet_deployment, "client")
    model = fresh_name("m")
    job = await client.submit(model)
    await admin.claim_one(model)

    async def listed() -> job_pb2.Worker | None:
        return next((w for w in await workers(admin) if w.worker_id == admin.worker_id), None)

    worker = await assert_eventually(listed, message="the worker is not listed")
    assert worker is not None
    assert (worker.pool, list(worker.models), list(worker.job_ids)) == (
        "default",  # the worker token's pool
        [model],
        [job.id],
    )


async def test_list_queues_counts_every_tenant_s_jobs_for_an_admin(
    fleet: ApiFactory, fleet_deployment: Deployment
) -> None:
    admin = as_role(fleet, fleet_deployment, "admin")
    client = as_role(fleet, fleet_deployment, "client")
    model = fresh_name("m")
    for _ in range(2):
        await client.submit(model)
    [row] = [q for q in await queues(admin) if q.model == model]
    assert (row.queued, row.processing, row.pool) == (2, 0, "")
    assert row.HasField("oldest_queued_time")


async def test_a_client_token_may_not_list_workers_or_queues(
    fleet: ApiFactory, fleet_deployment: Deployment
) -> None:
    client = as_role(fleet, fleet_deployment, "client")
    for call in (workers(client), queues(client)):
        assert (await failure_of(call)).code == grpc.StatusCode.PERMISSION_DENIED


async def test_open_mode_lists_workers_and_queues(apis: ApiFactory) -> None:
    anyone = apis(tenant_metadata(fresh_name("t")), ())
    model = fresh_name("m")
    await anyone.submit(model)
    assert [q.queued for q in await queues(anyone) if q.model == model] == [1]
    await workers(anyone)


async def test_the_gateway_serves_keda_without_credentials(
    fleet: ApiFactory, fleet_deployment: Deployment
) -> None:
    client = as_role(fleet, fleet_deployment, "client")
    model = fresh_name("m")
    channel = grpc.aio.insecure_channel(fleet_deployment.job_target)
    stub = externalscaler_pb2_grpc.ExternalScalerStub(channel)
    ref = keda.ScaledObjectRef(scalerMetadata={"model": model, "scalerAddress": "gw:50051"})
    try:
        stream = stub.StreamIsActive(ref, timeout=30)
        first = await stream.read()
        assert isinstance(first, keda.IsActiveResponse) and not first.result
        await client.submit(model)
        second = await stream.read()
        assert isinstance(second, keda.IsActiveResponse) and second.result
        stream.cancel()
        assert (await stub.IsActive(ref, timeout=10)).result
        request = keda.GetMetricsRequest(scaledObjectRef=ref, metricName=f"jobgate-{model}-any")
        [value] = (await stub.GetMetrics(request, timeout=10)).metricValues
        assert value.metricValue == 1
    finally:
        await channel.close(None)
