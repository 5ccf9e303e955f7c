"""End to end through real `jobgate gateway` and `jobgate worker-server` on redis+cluster://."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from jobgate.v1 import job_pb2
from tests.cluster_servers import ClusterDeployment
from tests.e2e.api import Api, fresh_name, spec, tenant_metadata
from tests.e2e.harness import FAST_SETTINGS, Deployment, redis_deployment

pytestmark = pytest.mark.redis

MODEL = "cluster-e2e"
EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def servers(
    shared_cluster: ClusterDeployment, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """Two gateways and a worker-server sharing one partition on the cluster."""
    deployment = redis_deployment(
        tmp_path_factory.mktemp("servers"),
        shared_cluster.url,
        fresh_name("p"),
        FAST_SETTINGS,
        gateways=2,
    ).start()
    yield deployment
    deployment.stop()


@pytest.fixture
async def api(servers: Deployment) -> AsyncIterator[Api]:
    job_channel = grpc.aio.insecure_channel(servers.job_targets[1])
    worker_channel = grpc.aio.insecure_channel(servers.worker_target)
    yield Api(job_channel, worker_channel, tenant_metadata(fresh_name("t")))
    await job_channel.close(None)
    await worker_channel.close(None)


async def test_a_job_runs_through_gateway_and_worker_server_on_the_cluster(api: Api) -> None:
    job = await api.submit(MODEL, b"input")
    stream = api.stream(job.id)
    first = await stream.read()
    assert first.job.status == job_pb2.JOB_STATUS_QUEUED
    claimed = await api.claim_one(MODEL)
    assert claimed.job.id == job.id
    assert claimed.payload == b"input"
    await api.complete(job.id, claimed.lease_id, b"done")
    statuses = [first.job.status]
    while statuses[-1] != job_pb2.JOB_STATUS_COMPLETED:
        update = await stream.read()
        assert update is not EOF, f"stream ended at {statuses}"
        statuses.append(update.job.status)
    assert statuses[-1] == job_pb2.JOB_STATUS_COMPLETED
    assert job_pb2.JOB_STATUS_PROCESSING in statuses
    done = await api.get(job.id)
    assert done.result == b"done"


async def test_a_group_completes_once_every_child_ran(api: Api) -> None:
    group = await api.submit_group([spec(MODEL, f"child {i}".encode()) for i in range(3)])
    for _ in range(3):
        await api.run_to_completion(MODEL)
    done = await api.get(group.id)
    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert len(done.children) == 3
