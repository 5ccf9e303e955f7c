"""Authentication, roles and tenant isolation with --auth-file (DESIGN: Tenancy)."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2

from tests.e2e.api import CANCELLED, QUEUED, Api, Failure, failure_of, fresh_name, parse_failure
from tests.e2e.conftest import ApiFactory
from tests.e2e.harness import AuthFile, Deployment, health_status
from tests.e2e.test_cancel import UNKNOWN_ID


def auth_of(deployment: Deployment) -> AuthFile:
    assert deployment.auth is not None
    return deployment.auth


def as_tenant(apis: ApiFactory, deployment: Deployment, tenant: str) -> Api:
    auth = auth_of(deployment)
    return apis(auth.client(tenant).metadata, auth.worker().metadata)


async def test_call_without_token_is_unauthenticated(auth_apis: ApiFactory, model: str) -> None:
    anonymous = auth_apis((), ())

    submit = await failure_of(anonymous.submit(model))
    claim = await failure_of(anonymous.claim([model]))

    assert submit.code == grpc.StatusCode.UNAUTHENTICATED, submit
    assert claim.code == grpc.StatusCode.UNAUTHENTICATED, claim


async def test_unknown_token_is_unauthenticated(auth_apis: ApiFactory, model: str) -> None:
    forged = (("authorization", "Bearer not-a-known-token"),)
    stranger = auth_apis(forged, forged)

    submit = await failure_of(stranger.submit(model))
    claim = await failure_of(stranger.claim([model]))

    assert submit.code == grpc.StatusCode.UNAUTHENTICATED, submit
    assert claim.code == grpc.StatusCode.UNAUTHENTICATED, claim


async def test_open_mode_tenant_header_is_not_a_credential(
    auth_apis: ApiFactory, model: str
) -> None:
    header_only = auth_apis((("x-jobgate-tenant", "acme"),), ())

    failure = await failure_of(header_only.submit(model))

    assert failure.code == grpc.StatusCode.UNAUTHENTICATED, failure


async def test_client_token_may_not_call_worker_service(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    client = auth_of(auth_deployment).client("acme").metadata
    api = auth_apis(client, client)

    failure = await failure_of(api.claim([model]))

    assert failure.code == grpc.StatusCode.PERMISSION_DENIED, failure


async def test_worker_token_may_not_call_job_service(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    worker = auth_of(auth_deployment).worker().metadata
    api = auth_apis(worker, worker)

    failure = await failure_of(api.submit(model))

    assert failure.code == grpc.StatusCode.PERMISSION_DENIED, failure


async def test_tenant_comes_from_the_token(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    auth = auth_of(auth_deployment)
    spoofing = auth_apis(
        (*auth.client("acme").metadata, ("x-jobgate-tenant", "globex")), auth.worker().metadata
    )

    job = await spoofing.submit(model)

    assert job.tenant == "acme"
    globex = as_tenant(auth_apis, auth_deployment, "globex")
    assert (await failure_of(globex.get(job.id))).code == grpc.StatusCode.NOT_FOUND


async def not_found_like_a_missing_job(api: Api, job_id: str, failure: Failure) -> None:
    missing = await failure_of(api.get(UNKNOWN_ID))
    assert failure.code == grpc.StatusCode.NOT_FOUND, failure
    assert (
        (failure.reason, failure.domain)
        == (missing.reason, missing.domain)
        == (
            "JOB_NOT_FOUND",
            "jobgate.dev",
        )
    )


async def test_another_tenants_job_is_not_found_for_get(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = as_tenant(auth_apis, auth_deployment, "acme")
    globex = as_tenant(auth_apis, auth_deployment, "globex")
    job = await acme.submit(model)

    await not_found_like_a_missing_job(globex, job.id, await failure_of(globex.get(job.id)))


async def test_another_tenants_job_is_not_found_for_cancel_and_stays_queued(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = as_tenant(auth_apis, auth_deployment, "acme")
    globex = as_tenant(auth_apis, auth_deployment, "globex")
    job = await acme.submit(model)

    failure = await failure_of(globex.cancel(job.id))

    await not_found_like_a_missing_job(globex, job.id, failure)
    assert (await acme.get(job.id)).status == QUEUED


async def test_another_tenants_job_is_not_found_for_stream_status(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = as_tenant(auth_apis, auth_deployment, "acme")
    globex = as_tenant(auth_apis, auth_deployment, "globex")
    job = await acme.submit(model)
    call = globex.stream(job.id)

    try:
        response = await asyncio.wait_for(call.read(), timeout=5.0)
    except grpc.aio.AioRpcError as error:
        failure = parse_failure(error)
    else:
        raise AssertionError(f"another tenant's stream sent {response!r}")

    await not_found_like_a_missing_job(globex, job.id, failure)


async def test_worker_claims_jobs_of_every_tenant(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = as_tenant(auth_apis, auth_deployment, "acme")
    globex = as_tenant(auth_apis, auth_deployment, "globex")
    jobs = [await acme.submit(model), await globex.submit(model)]

    claimed = await acme.claim([model], max_jobs=2)

    assert [(c.job.id, c.job.tenant) for c in claimed] == [(j.id, j.tenant) for j in jobs]
    assert [j.tenant for j in jobs] == ["acme", "globex"]
    for item in claimed:
        await acme.complete(item.job.id, item.lease_id)


async def test_owner_can_cancel_with_a_token(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = as_tenant(auth_apis, auth_deployment, "acme")
    job = await acme.submit(model)

    assert (await acme.cancel(job.id)).job.status == CANCELLED


def test_health_answers_without_a_token(auth_deployment: Deployment) -> None:
    for target in (*auth_deployment.job_targets, *auth_deployment.worker_targets):
        assert health_status(target) == health_pb2.HealthCheckResponse.SERVING


async def test_open_mode_without_tenant_header_is_the_default_tenant(
    apis: ApiFactory,
) -> None:
    anonymous = apis((), ())

    job = await anonymous.submit(fresh_name("m"))

    assert job.tenant == "default"


async def test_open_mode_isolates_tenants_by_header(apis: ApiFactory) -> None:
    mine = apis((("x-jobgate-tenant", fresh_name("t")),), ())
    theirs = apis((("x-jobgate-tenant", fresh_name("t")),), ())
    job = await mine.submit(fresh_name("m"))

    failure = await failure_of(theirs.get(job.id))

    assert failure.code == grpc.StatusCode.NOT_FOUND, failure
    assert failure.reason == "JOB_NOT_FOUND"
