"""Placement rules (DESIGN "Placement"): the pool a job is bound to, and a worker's claim pool."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from google.rpc import code_pb2

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from serving.auth import Authenticator, Caller, Role
from serving.placement import (
    PoolNotAllowed,
    bind_batch,
    bind_submit,
    check_retry,
    claim_pool,
    job_pool,
)
from store.memory import LocalStore
from store.model import GroupSpec, JobSpec, StoreSettings, SubmitRequest, SubmitResult
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, Metadata, fails

ONPREM = ("onprem", "edge")


def single(pool: str = "") -> SubmitRequest:
    return SubmitRequest(tenant="acme", work=JobSpec(model="m", pool=pool))


def group(*pools: str) -> SubmitRequest:
    children = tuple(JobSpec(model="m", pool=pool) for pool in pools)
    return SubmitRequest(tenant="acme", work=GroupSpec(children=children))


def test_a_restricted_tenants_job_naming_no_pool_gets_its_first_pool() -> None:
    assert job_pool(ONPREM, "", "job.pool") == "onprem"


def test_an_unrestricted_tenants_job_naming_no_pool_may_run_anywhere() -> None:
    assert job_pool(None, "", "job.pool") == ""


def test_a_job_naming_an_allowed_pool_is_bound_to_it() -> None:
    assert job_pool(ONPREM, "edge", "job.pool") == "edge"


def test_an_unrestricted_tenant_may_name_any_pool() -> None:
    assert job_pool(None, "gpu-a", "job.pool") == "gpu-a"


def test_a_pool_outside_the_tenants_list_is_refused_naming_pool_and_field() -> None:
    with pytest.raises(PoolNotAllowed) as refused:
        job_pool(ONPREM, "cloud", "job.pool")
    error = refused.value
    assert (error.code, error.reason) == (code_pb2.PERMISSION_DENIED, "POOL_NOT_ALLOWED")
    assert error.metadata == {"pool": "cloud", "field": "job.pool"}
    assert error.message.startswith("job.pool: 'cloud'")


def test_binding_a_single_job_fills_its_spec() -> None:
    bound = bind_submit(ONPREM, single())
    assert isinstance(bound.work, JobSpec)
    assert bound.work.pool == "onprem"


def test_binding_a_group_binds_every_child() -> None:
    bound = bind_submit(ONPREM, group("", "edge", ""))
    assert isinstance(bound.work, GroupSpec)
    assert [child.pool for child in bound.work.children] == ["onprem", "edge", "onprem"]


def test_one_disallowed_child_refuses_the_group_naming_its_index() -> None:
    with pytest.raises(PoolNotAllowed) as refused:
        bind_submit(ONPREM, group("", "", "", "cloud"))
    assert refused.value.field == "group.children[3].pool"


def test_one_disallowed_item_refuses_the_batch_naming_its_index() -> None:
    with pytest.raises(PoolNotAllowed) as refused:
        bind_batch(ONPREM, [single(), single("edge"), single("cloud")])
    assert refused.value.field == "requests[2].job.pool"


def test_a_batch_items_group_child_is_named_by_both_indexes() -> None:
    with pytest.raises(PoolNotAllowed) as refused:
        bind_batch(ONPREM, [single(), group("edge", "cloud")])
    assert refused.value.field == "requests[1].group.children[1].pool"


def test_binding_a_batch_binds_each_item() -> None:
    bound = bind_batch(ONPREM, [single(), single("edge")])
    assert [item.work.pool for item in bound if isinstance(item.work, JobSpec)] == [
        "onprem",
        "edge",
    ]


def test_a_worker_naming_no_pool_claims_for_its_credentials_pool() -> None:
    assert claim_pool(Caller("fleet", Role.WORKER, pool="gpu-a"), "") == "gpu-a"


def test_a_worker_naming_its_own_pool_claims_for_it() -> None:
    assert claim_pool(Caller("fleet", Role.WORKER, pool="gpu-a"), "gpu-a") == "gpu-a"


def test_a_worker_naming_another_pool_is_refused() -> None:
    with pytest.raises(PoolNotAllowed) as refused:
        claim_pool(Caller("fleet", Role.WORKER, pool="gpu-a"), "onprem")
    assert (refused.value.reason, refused.value.field) == ("POOL_NOT_ALLOWED", "pool")


def test_an_open_mode_worker_claims_for_the_pool_it_names() -> None:
    assert claim_pool(Caller("default", None), "gpu-b") == "gpu-b"


def test_an_open_mode_worker_naming_no_pool_claims_for_default() -> None:
    assert claim_pool(Caller("default", None), "") == "default"


def test_a_retry_into_an_allowed_pool_passes() -> None:
    check_retry(ONPREM, "01ARZ3NDEKTSV4RRFFQ69G5FAV", "edge")
    check_retry(None, "01ARZ3NDEKTSV4RRFFQ69G5FAV", "")


def test_a_retry_into_a_pool_the_tenant_lost_is_refused() -> None:
    with pytest.raises(PoolNotAllowed) as refused:
        check_retry(("edge",), "01ARZ3NDEKTSV4RRFFQ69G5FAV", "onprem")
    assert refused.value.metadata["job_id"] == "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def test_an_any_pool_job_of_a_tenant_since_restricted_is_not_retried_anywhere() -> None:
    with pytest.raises(PoolNotAllowed, match="any pool"):
        check_retry(ONPREM, "01ARZ3NDEKTSV4RRFFQ69G5FAV", "")


# -- through the servers ------------------------------------------------------


class RecordingStore(LocalStore):
    """LocalStore that keeps every submit request it was given."""

    def __init__(self) -> None:
        super().__init__(StoreSettings())
        self.submitted: list[SubmitRequest] = []

    async def submit(self, request: SubmitRequest) -> SubmitResult:
        self.submitted.append(request)
        return await super().submit(request)

    async def submit_batch(self, requests: Sequence[SubmitRequest]) -> list[SubmitResult]:
        self.submitted.extend(requests)
        return await super().submit_batch(requests)


TOKENS: dict[str, dict[str, object]] = {
    "onprem-token": {"tenant": "bank", "role": "client", "pools": list(ONPREM)},
    "free-token": {"tenant": "lab", "role": "client"},
    "gpu-token": {"tenant": "fleet", "role": "worker", "pool": "gpu-a"},
}


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
def store() -> RecordingStore:
    return RecordingStore()


@pytest.fixture
async def placed(make_harness: MakeHarness, tmp_path: Path, store: RecordingStore) -> Harness:
    entries = [
        {"sha256": hashlib.sha256(token.encode()).hexdigest(), **fields}
        for token, fields in TOKENS.items()
    ]
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"tokens": entries}))
    return await make_harness(auth=Authenticator.from_file(str(path)), store=store)


def submit(pool: str = "") -> job_service_pb2.SubmitRequest:
    return job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m", pool=pool))


async def test_the_store_is_given_the_restricted_tenants_first_pool(
    placed: Harness, store: RecordingStore
) -> None:
    await placed.job.Submit(submit(), metadata=bearer("onprem-token"), timeout=5)
    [request] = store.submitted
    assert isinstance(request.work, JobSpec)
    assert request.work.pool == "onprem"


async def test_the_store_is_given_the_pool_a_free_tenant_names(
    placed: Harness, store: RecordingStore
) -> None:
    await placed.job.Submit(submit("gpu-b"), metadata=bearer("free-token"), timeout=5)
    assert [r.work.pool for r in store.submitted if isinstance(r.work, JobSpec)] == ["gpu-b"]


async def test_a_disallowed_pool_is_permission_denied_and_creates_nothing(
    placed: Harness, store: RecordingStore
) -> None:
    failure = await fails(placed.job.Submit(submit("cloud"), metadata=bearer("onprem-token")))
    assert (failure.code, failure.reasons) == (
        grpc.StatusCode.PERMISSION_DENIED,
        ["POOL_NOT_ALLOWED"],
    )
    assert "job.pool" in failure.message
    assert store.submitted == []


async def test_a_group_with_one_disallowed_child_creates_nothing(
    placed: Harness, store: RecordingStore
) -> None:
    children = [job_pb2.JobSpec(model="m"), job_pb2.JobSpec(model="m", pool="cloud")]
    request = job_service_pb2.SubmitRequest(group=job_pb2.GroupSpec(children=children))
    failure = await fails(placed.job.Submit(request, metadata=bearer("onprem-token")))
    assert (failure.code, failure.reasons) == (
        grpc.StatusCode.PERMISSION_DENIED,
        ["POOL_NOT_ALLOWED"],
    )
    assert "group.children[1].pool" in failure.message
    assert store.submitted == []


async def test_a_batch_with_one_disallowed_item_creates_nothing(
    placed: Harness, store: RecordingStore
) -> None:
    request = job_service_pb2.BatchSubmitRequest(requests=[submit(), submit("cloud")])
    failure = await fails(placed.job.BatchSubmit(request, metadata=bearer("onprem-token")))
    assert (failure.code, failure.reasons) == (
        grpc.StatusCode.PERMISSION_DENIED,
        ["POOL_NOT_ALLOWED"],
    )
    assert "requests[1].job.pool" in failure.message
    assert store.submitted == []


def claim_request(pool: str) -> worker_service_pb2.ClaimNextRequest:
    return worker_service_pb2.ClaimNextRequest(worker_id="w", models=["m"], pool=pool)


async def test_a_worker_claiming_for_another_pool_is_permission_denied(placed: Harness) -> None:
    call = placed.worker.ClaimNext(claim_request("onprem"), metadata=bearer("gpu-token"))
    failure = await fails(call)
    assert (failure.code, failure.reasons) == (
        grpc.StatusCode.PERMISSION_DENIED,
        ["POOL_NOT_ALLOWED"],
    )


async def test_the_fast_path_refuses_another_pool_too(placed: Harness) -> None:
    request = worker_service_pb2.ReportAndClaimRequest(
        worker_id="w", models=["m"], max_jobs=1, pool="onprem"
    )
    failure = await fails(placed.worker.ReportAndClaim(request, metadata=bearer("gpu-token")))
    assert failure.reasons == ["POOL_NOT_ALLOWED"]


@pytest.mark.parametrize("pool", ["", "gpu-a"])
async def test_a_worker_claiming_for_its_own_pool_is_served(placed: Harness, pool: str) -> None:
    response = await placed.worker.ClaimNext(
        claim_request(pool), metadata=bearer("gpu-token"), timeout=5
    )
    assert list(response.jobs) == []


async def test_an_open_mode_worker_may_name_any_pool(harness: Harness) -> None:
    response = await harness.worker.ClaimNext(claim_request("anything"), timeout=5)
    assert list(response.jobs) == []
