"""Placement through real gRPC (DESIGN "Placement (worker pools)"), with --auth-file.

A restricted tenant's job is bound to one of its pools, a pool outside its
list is refused with nothing created, and a worker credential claims only for
its own pool and receives only that pool's and any-pool jobs. On both
topologies; every test uses models of its own on the module's deployment.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator

import grpc
import pytest

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from tests.e2e.api import Api, Failure, failure_of, fresh_name, spec
from tests.e2e.conftest import TOPOLOGIES, ApiFactory, api_factory, start_deployment
from tests.e2e.harness import FAST_SETTINGS, AuthFile, Deployment, Token, write_auth_file

#: bank may run only on its own hardware: "onprem" first, then "edge".
BANK_POOLS = ("onprem", "edge")


@pytest.fixture(scope="module", params=TOPOLOGIES)
def placed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A deployment whose auth file has a restricted tenant, a free one and two pools' workers."""
    workdir = tmp_path_factory.mktemp(f"placed-{request.param}")
    secret = uuid.uuid4().hex
    tokens = [
        Token(f"bank-{secret}", "bank", "client", pools=BANK_POOLS),
        Token(f"lab-{secret}", "lab", "client", weight=2),
        Token(f"onprem-{secret}", "fleet", "worker", pool="onprem"),
        Token(f"gpu-{secret}", "fleet", "worker", pool="gpu-a"),
    ]
    auth = write_auth_file(workdir / "auth.json", tokens)
    running = start_deployment(request, workdir, {**FAST_SETTINGS, "auth-file": str(auth.path)})
    running.auth = auth
    yield running
    running.stop()


@pytest.fixture
async def placed_apis(placed: Deployment) -> AsyncIterator[ApiFactory]:
    async with api_factory(placed) as make:
        yield make


def auth_of(deployment: Deployment) -> AuthFile:
    assert deployment.auth is not None
    return deployment.auth


@pytest.fixture
def bank(placed_apis: ApiFactory, placed: Deployment) -> Api:
    """The restricted tenant, with the onprem workers' credential on the worker side."""
    auth = auth_of(placed)
    return placed_apis(auth.client("bank").metadata, auth.worker("onprem").metadata)


@pytest.fixture
def lab(placed_apis: ApiFactory, placed: Deployment) -> Api:
    auth = auth_of(placed)
    return placed_apis(auth.client("lab").metadata, auth.worker("onprem").metadata)


@pytest.fixture
def gpu_worker(placed_apis: ApiFactory, placed: Deployment) -> Api:
    auth = auth_of(placed)
    return placed_apis((), auth.worker("gpu-a").metadata)


def assert_pool_not_allowed(failure: Failure, field: str = "") -> None:
    assert failure.code == grpc.StatusCode.PERMISSION_DENIED, failure
    assert failure.reason == "POOL_NOT_ALLOWED", failure
    assert field in failure.message, failure


async def created_nothing(api: Api, key: str, model: str) -> bool:
    """Nothing holds `key`: the same key with an allowed body creates a new job."""
    request = job_service_pb2.SubmitRequest(idempotency_key=key, job=spec(model))
    response = await api.submit_request(request)
    return not response.reused


async def test_a_restricted_tenants_job_naming_no_pool_is_bound_to_its_first_pool(
    bank: Api, model: str
) -> None:
    job = await bank.submit(model)

    assert job.pool == BANK_POOLS[0]
    assert (await bank.get(job.id)).pool == BANK_POOLS[0]


async def test_a_restricted_tenants_job_naming_one_of_its_pools_is_bound_to_it(
    bank: Api, model: str
) -> None:
    assert (await bank.submit(model, pool="edge")).pool == "edge"


async def test_a_free_tenants_job_naming_no_pool_may_run_in_any_pool(lab: Api, model: str) -> None:
    assert (await lab.submit(model)).pool == ""


async def test_a_free_tenants_job_is_bound_to_the_pool_it_names(lab: Api, model: str) -> None:
    assert (await lab.submit(model, pool="gpu-a")).pool == "gpu-a"


async def test_a_submit_naming_another_pool_is_pool_not_allowed_and_creates_nothing(
    bank: Api, model: str
) -> None:
    key = fresh_name("k")
    request = job_service_pb2.SubmitRequest(idempotency_key=key, job=spec(model, pool="gpu-a"))

    failure = await failure_of(bank.submit_request(request))

    assert_pool_not_allowed(failure, "job.pool")
    assert await created_nothing(bank, key, model)


async def test_a_group_with_one_child_in_another_pool_is_pool_not_allowed_and_creates_nothing(
    bank: Api, model: str
) -> None:
    key = fresh_name("k")
    children = [spec(model), spec(model, pool="edge"), spec(model, pool="gpu-a")]
    group = job_pb2.GroupSpec(children=children)
    request = job_service_pb2.SubmitRequest(idempotency_key=key, group=group)

    failure = await failure_of(bank.submit_request(request))

    assert_pool_not_allowed(failure, "group.children[2].pool")
    assert await created_nothing(bank, key, model)


async def test_a_batch_with_one_item_in_another_pool_is_pool_not_allowed_and_creates_nothing(
    bank: Api, model: str
) -> None:
    allowed, refused = fresh_name("k"), fresh_name("k")
    items = [
        job_service_pb2.SubmitRequest(idempotency_key=allowed, job=spec(model)),
        job_service_pb2.SubmitRequest(idempotency_key=refused, job=spec(model, pool="gpu-a")),
    ]

    failure = await failure_of(bank.batch_submit(*items))

    assert_pool_not_allowed(failure, "requests[1].job.pool")
    assert await created_nothing(bank, allowed, model)
    assert await created_nothing(bank, refused, model)


async def test_a_group_childs_pool_is_bound_like_a_jobs(bank: Api, model: str) -> None:
    parent = await bank.submit_group([spec(model), spec(model, pool="edge")])

    children = [await bank.get(child.id) for child in (await bank.get(parent.id)).children]

    assert [child.pool for child in children] == ["onprem", "edge"]


@pytest.mark.parametrize("method", ["ClaimNext", "ReportAndClaim"])
async def test_a_worker_claiming_for_another_pool_than_its_credentials_is_pool_not_allowed(
    gpu_worker: Api, model: str, method: str
) -> None:
    call: Awaitable[object]
    if method == "ClaimNext":
        call = gpu_worker.claim([model], pool="onprem")
    else:
        request = worker_service_pb2.ReportAndClaimRequest(
            worker_id=gpu_worker.worker_id, models=[model], max_jobs=1, pool="onprem"
        )
        call = gpu_worker.workers.ReportAndClaim(
            request, metadata=gpu_worker.worker_metadata, timeout=10
        )

    assert_pool_not_allowed(await failure_of(call))


async def test_a_job_bound_to_a_pool_reaches_only_that_pools_workers(
    bank: Api, gpu_worker: Api, model: str
) -> None:
    job = await bank.submit(model)

    assert await gpu_worker.claim([model]) == []
    assert await gpu_worker.claim([model], pool="gpu-a") == []
    claimed = await bank.claim_one(model)  # the onprem credential, naming no pool
    assert claimed.job.id == job.id


async def test_an_any_pool_job_reaches_the_workers_of_every_pool(
    lab: Api, gpu_worker: Api, model: str
) -> None:
    first, second = await lab.submit(model), await lab.submit(model)

    taken = [(await gpu_worker.claim_one(model)).job.id, (await lab.claim_one(model)).job.id]

    assert taken == [first.id, second.id]
