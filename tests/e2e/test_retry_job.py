"""RetryJob through real gRPC (DESIGN "RetryJob"): singles, groups, refusals, caps, scope."""

from __future__ import annotations

import grpc

from jobgate.v1 import job_pb2
from tests.e2e.api import (
    COMPLETED,
    FAILED,
    HELD,
    PARTIAL,
    PROCESSING,
    QUEUED,
    Api,
    failure_of,
    spec,
    tenant_metadata,
)
from tests.e2e.conftest import ADMIN_TENANT, ApiFactory
from tests.e2e.harness import Deployment
from tests.e2e.test_cancel import UNKNOWN_ID


async def failed(api: Api, model: str) -> job_pb2.Job:
    job = await api.submit(model, b"input")
    claimed = await api.claim_one(model)
    await api.fail(claimed.job.id, claimed.lease_id)
    return job


async def test_a_failed_job_is_retried_and_runs_again(api: Api, model: str) -> None:
    job = await failed(api, model)
    retried = await api.retry(job.id)
    assert (retried.status, retried.attempts, retried.error_code) == (QUEUED, 0, "")
    assert not retried.HasField("end_time")
    claimed = await api.claim_one(model)
    assert (claimed.job.id, claimed.payload, claimed.job.attempts) == (job.id, b"input", 1)
    done = await api.complete(claimed.job.id, claimed.lease_id, b"second")
    assert done.status == COMPLETED


async def test_the_old_attempts_report_is_lease_lost(api: Api, model: str) -> None:
    job = await api.submit(model)
    old = await api.claim_one(model)
    await api.cancel(job.id)
    await api.retry(job.id)
    failure = await failure_of(api.complete(job.id, old.lease_id))
    assert (failure.code, failure.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "LEASE_LOST")


async def test_a_partial_groups_unfinished_children_go_back(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model), spec(model), spec(model)], max_parallel=1)
    await api.run_to_completion(model, b"kept")
    for _ in range(2):
        claimed = await api.claim_one(model)
        await api.fail(claimed.job.id, claimed.lease_id)
    assert (await api.get(group.id)).status == PARTIAL
    retried = await api.retry(group.id)
    assert retried.status == QUEUED
    assert [c.status for c in retried.children] == [COMPLETED, QUEUED, HELD]
    running = await api.claim_one(model)
    assert (await api.get(group.id)).status == PROCESSING
    await api.complete(running.job.id, running.lease_id)
    await api.run_to_completion(model)
    assert (await api.get(group.id)).status == COMPLETED


async def test_a_job_that_is_not_failed_is_not_retryable(api: Api, model: str) -> None:
    job = await api.submit(model)
    failure = await failure_of(api.retry(job.id))
    assert (failure.code, failure.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "JOB_NOT_RETRYABLE",
    )


async def test_a_group_child_alone_is_not_retryable(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model)])
    claimed = await api.claim_one(model)
    await api.fail(claimed.job.id, claimed.lease_id)
    failure = await failure_of(api.retry(group.children[0].id))
    assert failure.reason == "JOB_NOT_RETRYABLE", failure


async def test_an_unknown_job_is_not_found_and_a_bad_id_names_job_id(api: Api) -> None:
    unknown = await failure_of(api.retry(UNKNOWN_ID))
    assert unknown.code == grpc.StatusCode.NOT_FOUND, unknown
    bad = await failure_of(api.retry("not-an-id"))
    assert (bad.code, bad.names_field("job_id")) == (grpc.StatusCode.INVALID_ARGUMENT, True)


async def test_the_tenants_cap_applies_with_retry_info(caps_apis: ApiFactory, tenant: str) -> None:
    api = caps_apis(tenant_metadata(tenant), ())
    job = await failed(api, "capped-retry")
    for _ in range(5):  # --max-live-per-tenant 5
        await api.submit("capped-other")
    failure = await failure_of(api.retry(job.id))
    assert (failure.code, failure.reason) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "TENANT_QUOTA_EXCEEDED",
    )
    assert failure.retry_delay is not None
    assert (await api.get(job.id)).status == FAILED


def _as(apis: ApiFactory, deployment: Deployment, tenant: str) -> Api:
    assert deployment.auth is not None
    auth = deployment.auth
    token = auth.admin() if tenant == ADMIN_TENANT else auth.client(tenant)
    return apis(token.metadata, auth.worker().metadata)


async def test_a_client_may_not_retry_another_tenants_job_but_an_admin_may(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = _as(auth_apis, auth_deployment, "acme")
    globex = _as(auth_apis, auth_deployment, "globex")
    admin = _as(auth_apis, auth_deployment, ADMIN_TENANT)
    job = await failed(acme, model)
    refused = await failure_of(globex.retry(job.id))
    assert refused.code == grpc.StatusCode.NOT_FOUND, refused
    assert (await admin.retry(job.id)).status == QUEUED
