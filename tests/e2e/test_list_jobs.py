"""ListJobs through real gRPC (DESIGN "ListJobs"): order, filters, page tokens, scope, bad input."""

from __future__ import annotations

import base64
from typing import Any

import grpc

from jobgate.v1 import job_pb2, job_service_pb2
from tests.e2e.api import (
    COMPLETED,
    QUEUED,
    Api,
    failure_of,
    fresh_name,
    spec,
)
from tests.e2e.conftest import ADMIN_TENANT, ApiFactory
from tests.e2e.harness import Deployment


def newest_first(jobs: list[job_pb2.Job]) -> list[str]:
    return [
        job.id
        for job in sorted(jobs, key=lambda j: (j.create_time.ToNanoseconds(), j.id), reverse=True)
    ]


async def submit_many(api: Api, model: str, count: int, **fields: Any) -> list[job_pb2.Job]:
    requests = [job_service_pb2.SubmitRequest(job=spec(model, **fields)) for _ in range(count)]
    return [response.job for response in await api.batch_submit(*requests)]


async def test_a_walk_lists_the_tenants_jobs_newest_first_page_by_page(
    api: Api, model: str
) -> None:
    jobs = await submit_many(api, model, 7)
    first = await api.list_jobs(page_size=3)
    assert len(first.jobs) == 3
    assert first.next_page_token
    listed = await api.list_all(page_size=3)
    assert [job.id for job in listed] == newest_first(jobs)


async def test_page_size_zero_means_fifty(api: Api, model: str) -> None:
    await submit_many(api, model, 51)
    page = await api.list_jobs()
    assert len(page.jobs) == 50
    assert page.next_page_token


async def test_the_last_page_has_no_token(api: Api, model: str) -> None:
    await submit_many(api, model, 2)
    page = await api.list_jobs(page_size=2)
    assert (len(page.jobs), page.next_page_token) == (2, "")


async def test_listed_jobs_have_no_result_children_or_position(api: Api, model: str) -> None:
    await api.submit(model)
    await api.run_to_completion(model, b"the result")
    await api.submit_group([spec(model), spec(model)])
    await api.submit(model)
    for job in await api.list_all(page_size=10):
        assert not job.HasField("queue_position")
        assert (job.result, list(job.children)) == (b"", [])


async def test_filters_on_status_model_kind_parent_and_labels(api: Api, model: str) -> None:
    other = fresh_name("m")
    await api.submit(other, labels={"team": "ads"})
    wanted = await api.submit(model, labels={"team": "search"})
    group = await api.submit_group([spec(model), spec(model)])
    claimed = await api.claim_one(other)
    await api.fail(claimed.job.id, claimed.lease_id)

    def listed(jobs: list[job_pb2.Job]) -> set[str]:
        return {job.id for job in jobs}

    assert listed(await api.list_all("status = FAILED")) == {claimed.job.id}
    assert listed(await api.list_all(f"model = {model} AND kind = SINGLE")) == {wanted.id}
    assert listed(await api.list_all("kind = GROUP")) == {group.id}
    children = await api.list_all(f'parent_id = "{group.id}"', page_size=1)
    assert [job.child_index for job in children] == [1, 0]
    assert listed(await api.list_all('labels.team = "search"')) == {wanted.id}


async def test_a_token_keeps_working_while_jobs_change(api: Api, model: str) -> None:
    jobs = await submit_many(api, model, 6)
    page = await api.list_jobs(f"model = {model}", page_size=2)
    await api.submit(model)  # newer than the walk's start: not listed
    await api.run_to_completion(model)
    listed = [job.id for job in page.jobs]
    token = page.next_page_token
    while token:
        page = await api.list_jobs(f"model = {model}", 2, token)
        listed += [job.id for job in page.jobs]
        token = page.next_page_token
    assert listed == newest_first(jobs)


async def test_a_status_change_shows_in_the_list(api: Api, model: str) -> None:
    job = await api.submit(model)
    [queued] = await api.list_all(f"model = {model}")
    assert queued.status == QUEUED
    await api.run_to_completion(model)
    [done] = await api.list_all(f"model = {model} AND status = COMPLETED")
    assert (done.id, done.status) == (job.id, COMPLETED)
    assert await api.list_all(f"model = {model} AND status = FAILED") == []


# -- bad input ----------------------------------------------------------------


async def test_a_filter_that_does_not_parse_names_filter(api: Api) -> None:
    failure = await failure_of(api.list_jobs("status = FAILED and model = m"))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert failure.names_field("filter"), failure
    assert "offset" in failure.message


async def test_a_tenant_term_from_a_client_names_filter(api: Api) -> None:
    failure = await failure_of(api.list_jobs("tenant = acme"))
    assert (failure.code, failure.names_field("filter")) == (grpc.StatusCode.INVALID_ARGUMENT, True)


async def test_a_negative_page_size_names_page_size(api: Api) -> None:
    failure = await failure_of(api.list_jobs(page_size=-1))
    assert (failure.code, failure.names_field("page_size")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        True,
    )


async def test_a_forged_token_names_page_token(api: Api) -> None:
    forged = base64.urlsafe_b64encode(b"not a token").decode().rstrip("=")
    failure = await failure_of(api.list_jobs(page_token=forged))
    assert (failure.code, failure.names_field("page_token")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        True,
    )


async def test_a_token_reused_with_another_filter_names_page_token(api: Api, model: str) -> None:
    await submit_many(api, model, 3)
    page = await api.list_jobs(page_size=1)
    failure = await failure_of(api.list_jobs("status = QUEUED", 1, page.next_page_token))
    assert (failure.code, failure.names_field("page_token")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        True,
    )


# -- scope: clients and the admin ---------------------------------------------


def _as(apis: ApiFactory, deployment: Deployment, tenant: str) -> Api:
    assert deployment.auth is not None
    auth = deployment.auth
    token = auth.admin() if tenant == ADMIN_TENANT else auth.client(tenant)
    return apis(token.metadata, auth.worker().metadata)


async def test_a_client_lists_only_its_tenants_jobs(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = _as(auth_apis, auth_deployment, "acme")
    globex = _as(auth_apis, auth_deployment, "globex")
    mine = await acme.submit(model)
    await globex.submit(model)
    assert [job.id for job in await acme.list_all(f"model = {model}")] == [mine.id]


async def test_an_admin_lists_every_tenants_jobs_and_may_filter_on_tenant(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = _as(auth_apis, auth_deployment, "acme")
    globex = _as(auth_apis, auth_deployment, "globex")
    admin = _as(auth_apis, auth_deployment, ADMIN_TENANT)
    jobs = [await acme.submit(model), await globex.submit(model)]
    assert [job.id for job in await admin.list_all(f"model = {model}")] == newest_first(jobs)
    by_tenant = await admin.list_all(f"model = {model} AND tenant = globex")
    assert [job.id for job in by_tenant] == [jobs[1].id]


async def test_an_admins_token_is_refused_to_a_client(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = _as(auth_apis, auth_deployment, "acme")
    admin = _as(auth_apis, auth_deployment, ADMIN_TENANT)
    await acme.submit(model)
    await acme.submit(model)
    page = await admin.list_jobs(f"model = {model}", 1)
    failure = await failure_of(acme.list_jobs(f"model = {model}", 1, page.next_page_token))
    assert failure.names_field("page_token"), failure


async def test_an_admin_gets_streams_and_cancels_another_tenants_job(
    auth_apis: ApiFactory, auth_deployment: Deployment, model: str
) -> None:
    acme = _as(auth_apis, auth_deployment, "acme")
    globex = _as(auth_apis, auth_deployment, "globex")
    admin = _as(auth_apis, auth_deployment, ADMIN_TENANT)
    job = await acme.submit(model)
    assert (await admin.get(job.id)).tenant == "acme"
    stream = admin.stream(job.id)
    first = await stream.read()
    assert first.job.id == job.id
    stream.cancel()
    assert (await admin.cancel(job.id)).cancelled
    failure = await failure_of(globex.get(job.id))
    assert failure.code == grpc.StatusCode.NOT_FOUND, failure
