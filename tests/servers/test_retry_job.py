"""RetryJob in the gateway: the tenant's current pools, the admin role, the metric, the audit."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from serving.auth import Authenticator
from store.memory import LocalStore
from store.model import StoreSettings
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, Metadata, fails

FAILED = job_pb2.JOB_STATUS_FAILED
QUEUED = job_pb2.JOB_STATUS_QUEUED


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


def auth(tmp_path: Path, name: str, tokens: Mapping[str, Mapping[str, object]]) -> Authenticator:
    entries = [
        {"sha256": hashlib.sha256(token.encode()).hexdigest(), **fields}
        for token, fields in tokens.items()
    ]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"tokens": entries}))
    return Authenticator.from_file(str(path))


TOKENS: dict[str, dict[str, object]] = {
    "bank-token": {"tenant": "bank", "role": "client", "pools": ["onprem", "edge"]},
    "lab-token": {"tenant": "lab", "role": "client"},
    "ops-token": {"tenant": "ops", "role": "admin"},
    "worker-token": {"tenant": "fleet", "role": "worker", "pool": "edge"},
}


async def failed_job(harness: Harness, token: str, pool: str = "") -> job_pb2.Job:
    request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m", pool=pool))
    job = (await harness.job.Submit(request, metadata=bearer(token), timeout=5)).job
    claim = worker_service_pb2.ClaimNextRequest(worker_id="w1", models=["m"])
    metadata = bearer("worker-token")  # serves "edge": takes edge and any-pool jobs
    [claimed] = (await harness.worker.ClaimNext(claim, metadata=metadata, timeout=5)).jobs
    report = worker_service_pb2.SetResultRequest(
        job_id=job.id, lease_id=claimed.lease_id, status=FAILED, error_code="E"
    )
    return (await harness.worker.SetResult(report, metadata=metadata, timeout=5)).job


async def retry(harness: Harness, job_id: str, token: str) -> job_pb2.Job:
    request = job_service_pb2.RetryJobRequest(job_id=job_id)
    return (await harness.job.RetryJob(request, metadata=bearer(token), timeout=5)).job


@pytest.fixture
def store() -> LocalStore:
    return LocalStore(StoreSettings())


@pytest.fixture
async def gateway(make_harness: MakeHarness, tmp_path: Path, store: LocalStore) -> Harness:
    return await make_harness(auth=auth(tmp_path, "auth", TOKENS), store=store)


async def test_a_job_in_a_pool_its_tenant_still_has_is_retried(gateway: Harness) -> None:
    job = await failed_job(gateway, "bank-token", "edge")
    assert (await retry(gateway, job.id, "bank-token")).status == QUEUED


async def test_a_job_in_a_pool_its_tenant_lost_is_pool_not_allowed(
    make_harness: MakeHarness, tmp_path: Path, store: LocalStore, gateway: Harness
) -> None:
    job = await failed_job(gateway, "bank-token", "edge")
    narrowed = {**TOKENS, "bank-token": {**TOKENS["bank-token"], "pools": ["onprem"]}}
    later = await make_harness(auth=auth(tmp_path, "later", narrowed), store=store)
    failure = await fails(retry(later, job.id, "bank-token"))
    assert (failure.code, failure.reasons) == (
        grpc.StatusCode.PERMISSION_DENIED,
        ["POOL_NOT_ALLOWED"],
    )
    assert (await store.get("bank", job.id)).status.value == "failed"


async def test_an_admins_retry_checks_the_jobs_tenants_pools(
    make_harness: MakeHarness, tmp_path: Path, store: LocalStore, gateway: Harness
) -> None:
    job = await failed_job(gateway, "bank-token", "edge")
    narrowed = {**TOKENS, "bank-token": {**TOKENS["bank-token"], "pools": ["onprem"]}}
    later = await make_harness(auth=auth(tmp_path, "later", narrowed), store=store)
    failure = await fails(retry(later, job.id, "ops-token"))
    assert failure.reasons == ["POOL_NOT_ALLOWED"]


async def test_a_client_may_not_retry_another_tenants_job(gateway: Harness) -> None:
    job = await failed_job(gateway, "lab-token")
    failure = await fails(retry(gateway, job.id, "bank-token"))
    assert (failure.code, failure.reasons) == (grpc.StatusCode.NOT_FOUND, ["JOB_NOT_FOUND"])


async def test_an_admin_retries_any_tenants_job_and_is_named_in_the_audit(
    gateway: Harness, store: LocalStore
) -> None:
    job = await failed_job(gateway, "lab-token")
    start = await store.newest_event_id()
    assert (await retry(gateway, job.id, "ops-token")).status == QUEUED
    [event] = await store.events(after=start)
    assert (event.job_id, event.actor) == (job.id, "admin:ops")


async def test_an_admins_cancel_is_named_in_the_audit(gateway: Harness, store: LocalStore) -> None:
    request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m"))
    job = (await gateway.job.Submit(request, metadata=bearer("lab-token"), timeout=5)).job
    start = await store.newest_event_id()
    cancel = job_service_pb2.CancelRequest(job_id=job.id)
    await gateway.job.Cancel(cancel, metadata=bearer("ops-token"), timeout=5)
    [event] = await store.events(after=start)
    assert event.actor == "admin:ops"


async def test_a_client_retry_is_not_named_in_the_audit(
    gateway: Harness, store: LocalStore
) -> None:
    job = await failed_job(gateway, "lab-token")
    start = await store.newest_event_id()
    await retry(gateway, job.id, "lab-token")
    assert [event.actor for event in await store.events(after=start)] == [""]


async def test_a_retry_counts_in_jobs_retried_total(gateway: Harness) -> None:
    job = await failed_job(gateway, "lab-token")
    await retry(gateway, job.id, "lab-token")
    assert await gateway.value("jobgate_jobs_retried_total", {"model": "m"}) == 1.0


async def test_a_refused_retry_counts_nothing(gateway: Harness) -> None:
    request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m"))
    job = (await gateway.job.Submit(request, metadata=bearer("lab-token"), timeout=5)).job
    failure = await fails(retry(gateway, job.id, "lab-token"))
    assert (failure.code, failure.reasons) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        ["JOB_NOT_RETRYABLE"],
    )
    assert not await gateway.value("jobgate_jobs_retried_total", {"model": "m"})


async def test_a_groups_retry_counts_its_children_redone(harness: Harness) -> None:
    children = [job_pb2.JobSpec(model="m"), job_pb2.JobSpec(model="m2")]
    group = job_pb2.GroupSpec(children=children)
    request = job_service_pb2.SubmitRequest(group=group)
    parent = (await harness.job.Submit(request, timeout=5)).job
    await harness.job.Cancel(job_service_pb2.CancelRequest(job_id=parent.id), timeout=5)
    await harness.job.RetryJob(job_service_pb2.RetryJobRequest(job_id=parent.id), timeout=5)
    assert await harness.value("jobgate_jobs_retried_total", {"model": "m"}) == 1.0
    assert await harness.value("jobgate_jobs_retried_total", {"model": "m2"}) == 1.0
