"""BatchSubmit over real gRPC: answers in order, all or nothing, the refused item named."""

from __future__ import annotations

import grpc

from jobgate.v1 import job_pb2, job_service_pb2
from serving.settings import ServerSettings
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, fails

TENANT = (("x-jobgate-tenant", "t1"),)


def job(model: str = "m", key: str = "", **fields: object) -> job_service_pb2.SubmitRequest:
    spec = job_pb2.JobSpec(model=model, **fields)  # type: ignore[arg-type]
    return job_service_pb2.SubmitRequest(idempotency_key=key, job=spec)


def group(children: int, model: str = "m") -> job_service_pb2.SubmitRequest:
    specs = [job_pb2.JobSpec(model=model) for _ in range(children)]
    return job_service_pb2.SubmitRequest(group=job_pb2.GroupSpec(children=specs))


def batch(*items: job_service_pb2.SubmitRequest) -> job_service_pb2.BatchSubmitRequest:
    return job_service_pb2.BatchSubmitRequest(requests=items)


async def queued(harness: Harness) -> int:
    return len(await harness.claim(max_jobs=64))


async def test_batch_submit_answers_each_item_in_request_order(harness: Harness) -> None:
    request = batch(job(payload=b"a"), group(2), job(payload=b"c"))
    response = await harness.job.BatchSubmit(request, metadata=TENANT, timeout=5)
    kinds = [item.job.kind for item in response.responses]
    assert kinds == [job_pb2.JOB_KIND_SINGLE, job_pb2.JOB_KIND_GROUP, job_pb2.JOB_KIND_SINGLE]
    assert all(item.job.tenant == "t1" for item in response.responses)
    claimed = [item.job.id for item in await harness.claim(max_jobs=64)]
    singles = [response.responses[0].job.id, response.responses[2].job.id]
    assert [job_id for job_id in claimed if job_id in singles] == singles


async def test_an_invalid_item_is_named_and_nothing_is_created(harness: Harness) -> None:
    failure = await fails(harness.job.BatchSubmit(batch(job(), job(model="Bad")), timeout=5))
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT
    assert failure.violations == ["requests[1].job.model"]
    assert await queued(harness) == 0


async def test_a_group_items_child_violation_names_both_indexes(harness: Harness) -> None:
    bad_group = job_service_pb2.SubmitRequest(
        group=job_pb2.GroupSpec(children=[job_pb2.JobSpec(model="m"), job_pb2.JobSpec()])
    )
    failure = await fails(harness.job.BatchSubmit(batch(job(), bad_group), timeout=5))
    assert failure.violations == ["requests[1].group.children[1].model"]


async def test_a_reused_key_with_another_request_is_already_exists_naming_the_item(
    harness: Harness,
) -> None:
    await harness.job.Submit(job(key="k1"), timeout=5)
    request = batch(job(key="new"), job(key="k1", payload=b"other"))
    failure = await fails(harness.job.BatchSubmit(request, timeout=5))
    assert failure.code is grpc.StatusCode.ALREADY_EXISTS
    assert failure.reasons == ["IDEMPOTENCY_KEY_REUSED"]
    assert failure.violations == ["requests[1].idempotency_key"]
    assert await queued(harness) == 1  # only the first Submit's job; "new" not created


async def test_the_same_key_twice_in_a_batch_answers_one_job(harness: Harness) -> None:
    response = await harness.job.BatchSubmit(batch(job(key="k"), job(key="k")), timeout=5)
    first, second = response.responses
    assert (first.reused, second.reused) == (False, True)
    assert first.job.id == second.job.id


async def test_an_item_over_the_tenant_cap_is_resource_exhausted_naming_it(
    make_harness: MakeHarness,
) -> None:
    harness = await make_harness(settings=ServerSettings(max_live_per_tenant=3))
    await harness.submit()
    await harness.submit()
    failure = await fails(harness.job.BatchSubmit(batch(job(), job()), timeout=5))
    assert failure.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert failure.reasons == ["TENANT_QUOTA_EXCEEDED"]
    assert failure.retry_delay is not None
    assert failure.violations == ["requests[1]"]
    assert await queued(harness) == 2


async def test_a_batch_that_can_never_fit_the_live_cap_is_invalid_argument(
    make_harness: MakeHarness,
) -> None:
    harness = await make_harness(settings=ServerSettings(max_live_per_tenant=3))
    failure = await fails(harness.job.BatchSubmit(batch(group(2), group(2)), timeout=5))
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT
    assert (failure.violations, failure.retry_delay) == (["requests"], None)


async def test_a_group_item_over_max_group_children_is_named(make_harness: MakeHarness) -> None:
    harness = await make_harness(settings=ServerSettings(max_group_children=2))
    failure = await fails(harness.job.BatchSubmit(batch(job(), group(3)), timeout=5))
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT
    assert failure.violations == ["requests[1].group.children"]


async def test_more_items_than_max_batch_submit_is_invalid_argument(
    make_harness: MakeHarness,
) -> None:
    harness = await make_harness(settings=ServerSettings(max_batch_submit=2))
    failure = await fails(harness.job.BatchSubmit(batch(job(), job(), job()), timeout=5))
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT
    assert failure.violations == ["requests"]
    assert await queued(harness) == 0


async def test_a_batch_at_max_batch_submit_is_accepted(make_harness: MakeHarness) -> None:
    harness = await make_harness(settings=ServerSettings(max_batch_submit=2))
    response = await harness.job.BatchSubmit(batch(job(), job()), timeout=5)
    assert len(response.responses) == 2


async def test_an_empty_batch_is_invalid_argument(harness: Harness) -> None:
    failure = await fails(harness.job.BatchSubmit(batch(), timeout=5))
    assert (failure.code, failure.violations) == (grpc.StatusCode.INVALID_ARGUMENT, ["requests"])


async def test_submitted_total_counts_the_jobs_a_batch_created_only(harness: Harness) -> None:
    await harness.job.Submit(job("a", key="old"), metadata=TENANT, timeout=5)
    request = batch(job("a", key="old"), job("a", key="k"), job("a", key="k"), job("a"), group(2))
    await harness.job.BatchSubmit(request, metadata=TENANT, timeout=5)
    labels = {"tenant": "t1", "model": "a", "priority": "batch"}
    assert await harness.value("jobgate_jobs_submitted_total", labels) == 3  # old, k, unkeyed
    assert await harness.value("jobgate_jobs_submitted_total", {**labels, "model": "m"}) == 2


async def test_a_refused_batch_counts_nothing_submitted(harness: Harness) -> None:
    await harness.job.Submit(job("a", key="k1"), metadata=TENANT, timeout=5)
    request = batch(job("a"), job("a", key="k1", payload=b"other"))
    await fails(harness.job.BatchSubmit(request, metadata=TENANT, timeout=5))
    labels = {"tenant": "t1", "model": "a", "priority": "batch"}
    assert await harness.value("jobgate_jobs_submitted_total", labels) == 1
