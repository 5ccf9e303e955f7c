"""Admission caps (DESIGN: Admission), on a deployment with tiny caps:
--max-live-per-tenant 5 --max-live-total 8 --max-group-children 3 --max-payload-bytes 1024.

Every Api made by `caps_apis` cancels its jobs afterwards, so the shared
total cap starts empty for each test.
"""

from __future__ import annotations

import grpc

from jobgate.v1 import job_service_pb2
from tests.e2e.api import ERROR_DOMAIN, Api, Failure, failure_of, fresh_name, spec, tenant_metadata
from tests.e2e.conftest import ApiFactory

PER_TENANT = 5
TOTAL = 8
GROUP_CHILDREN = 3
PAYLOAD_BYTES = 1024


def tenant_api(caps_apis: ApiFactory) -> Api:
    return caps_apis(tenant_metadata(fresh_name("t")), ())


def assert_retry_later(failure: Failure, reason: str) -> None:
    assert failure.code == grpc.StatusCode.RESOURCE_EXHAUSTED, failure
    assert (failure.reason, failure.domain) == (reason, ERROR_DOMAIN)
    assert failure.retry_delay is not None and failure.retry_delay > 0, failure


def assert_never_fits(failure: Failure, field: str) -> None:
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert failure.names_field(field), failure


async def fill(api: Api, count: int) -> list[str]:
    model = fresh_name("m")
    return [(await api.submit(model)).id for _ in range(count)]


async def test_over_the_tenant_cap_is_resource_exhausted_with_retry_info(
    caps_apis: ApiFactory,
) -> None:
    api = tenant_api(caps_apis)
    await fill(api, PER_TENANT)

    failure = await failure_of(api.submit(fresh_name("m")))

    assert_retry_later(failure, "TENANT_QUOTA_EXCEEDED")


async def test_the_tenant_cap_counts_only_that_tenant(caps_apis: ApiFactory) -> None:
    await fill(tenant_api(caps_apis), PER_TENANT)

    other = tenant_api(caps_apis)

    assert (await other.submit(fresh_name("m"))).id


async def test_a_cancelled_job_frees_its_place_under_the_cap(caps_apis: ApiFactory) -> None:
    api = tenant_api(caps_apis)
    ids = await fill(api, PER_TENANT)

    await api.cancel(ids[0])

    assert (await api.submit(fresh_name("m"))).id


async def test_a_finished_job_frees_its_place_under_the_cap(caps_apis: ApiFactory) -> None:
    api = tenant_api(caps_apis)
    model = fresh_name("m")
    for _ in range(PER_TENANT):
        await api.submit(model)

    await api.run_to_completion(model)

    assert (await api.submit(model)).id


async def test_over_the_total_cap_is_queue_full_with_retry_info(caps_apis: ApiFactory) -> None:
    await fill(tenant_api(caps_apis), PER_TENANT)
    api = tenant_api(caps_apis)
    await fill(api, TOTAL - PER_TENANT)

    failure = await failure_of(api.submit(fresh_name("m")))

    assert_retry_later(failure, "QUEUE_FULL")


async def test_a_reused_submit_is_not_blocked_by_the_cap(caps_apis: ApiFactory) -> None:
    api = tenant_api(caps_apis)
    model = fresh_name("m")
    request = job_service_pb2.SubmitRequest(idempotency_key="k", job=spec(model))
    first = await api.submit_request(request)
    await fill(api, PER_TENANT - 1)

    again = await api.submit_request(request)

    assert again.reused and again.job.id == first.job.id


async def test_a_group_counts_its_children_against_the_tenant_cap(
    caps_apis: ApiFactory,
) -> None:
    api = tenant_api(caps_apis)
    model = fresh_name("m")
    await fill(api, PER_TENANT - 1)

    failure = await failure_of(api.submit_group([spec(model), spec(model)], max_parallel=1))

    assert_retry_later(failure, "TENANT_QUOTA_EXCEEDED")


async def test_a_group_at_the_children_cap_is_accepted(caps_apis: ApiFactory) -> None:
    api = tenant_api(caps_apis)
    model = fresh_name("m")

    group = await api.submit_group([spec(model) for _ in range(GROUP_CHILDREN)])

    assert len(group.children) == GROUP_CHILDREN


async def test_a_group_over_the_children_cap_is_invalid_argument(caps_apis: ApiFactory) -> None:
    api = tenant_api(caps_apis)
    model = fresh_name("m")

    failure = await failure_of(api.submit_group([spec(model)] * (GROUP_CHILDREN + 1)))

    assert_never_fits(failure, "children")


async def test_a_payload_at_the_limit_is_accepted(caps_apis: ApiFactory) -> None:
    api = tenant_api(caps_apis)
    model = fresh_name("m")

    await api.submit(model, b"x" * PAYLOAD_BYTES)

    assert (await api.claim_one(model)).payload == b"x" * PAYLOAD_BYTES


async def test_a_payload_over_the_limit_is_invalid_argument(caps_apis: ApiFactory) -> None:
    api = tenant_api(caps_apis)

    failure = await failure_of(api.submit(fresh_name("m"), b"x" * (PAYLOAD_BYTES + 1)))

    assert_never_fits(failure, "payload")


async def test_a_childs_payload_over_the_limit_is_invalid_argument(
    caps_apis: ApiFactory,
) -> None:
    api = tenant_api(caps_apis)
    model = fresh_name("m")

    failure = await failure_of(
        api.submit_group([spec(model), spec(model, b"x" * (PAYLOAD_BYTES + 1))])
    )

    assert_never_fits(failure, "payload")


async def test_a_result_over_the_limit_is_invalid_argument(caps_apis: ApiFactory) -> None:
    api = tenant_api(caps_apis)
    model = fresh_name("m")
    await api.submit(model)
    claimed = await api.claim_one(model)

    failure = await failure_of(
        api.complete(claimed.job.id, claimed.lease_id, b"x" * (PAYLOAD_BYTES + 1))
    )

    assert_never_fits(failure, "result")
