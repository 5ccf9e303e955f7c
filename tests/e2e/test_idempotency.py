"""Idempotency keys (DESIGN: Idempotency)."""

from __future__ import annotations

import grpc

from jobgate.v1 import job_pb2, job_service_pb2
from tests.e2e.api import (
    COMPLETED,
    ERROR_DOMAIN,
    INTERACTIVE,
    Api,
    failure_of,
    spec,
    tenant_metadata,
)
from tests.e2e.conftest import ApiFactory


def request(model: str, key: str, payload: bytes = b"p") -> job_service_pb2.SubmitRequest:
    return job_service_pb2.SubmitRequest(idempotency_key=key, job=spec(model, payload))


async def test_same_key_and_request_returns_the_existing_job(api: Api, model: str) -> None:
    first = await api.submit_request(request(model, "key-1"))
    again = await api.submit_request(request(model, "key-1"))

    assert not first.reused
    assert again.reused
    assert again.job.id == first.job.id
    assert again.job.idempotency_key == "key-1"


async def test_a_reused_submit_creates_no_new_job(api: Api, model: str) -> None:
    await api.submit_request(request(model, "key-1"))
    await api.submit_request(request(model, "key-1"))

    assert len(await api.claim([model], max_jobs=5)) == 1


async def test_same_key_with_a_different_request_is_already_exists(api: Api, model: str) -> None:
    await api.submit_request(request(model, "key-1", b"one"))

    failure = await failure_of(api.submit_request(request(model, "key-1", b"two")))

    assert failure.code == grpc.StatusCode.ALREADY_EXISTS, failure
    assert (failure.reason, failure.domain) == ("IDEMPOTENCY_KEY_REUSED", ERROR_DOMAIN)


async def test_same_key_with_another_priority_is_already_exists(api: Api, model: str) -> None:
    await api.submit_request(request(model, "key-1"))
    other = request(model, "key-1")
    other.priority = INTERACTIVE

    failure = await failure_of(api.submit_request(other))

    assert failure.code == grpc.StatusCode.ALREADY_EXISTS, failure


async def test_no_key_never_deduplicates(api: Api, model: str) -> None:
    first = await api.submit_request(request(model, ""))
    second = await api.submit_request(request(model, ""))

    assert first.job.id != second.job.id
    assert not second.reused
    assert len(await api.claim([model], max_jobs=5)) == 2


async def test_keys_are_scoped_to_the_tenant(apis: ApiFactory, model: str) -> None:
    acme = apis(tenant_metadata("acme-idem"), ())
    globex = apis(tenant_metadata("globex-idem"), ())
    key = f"shared-{model}"

    mine = await acme.submit_request(request(model, key))
    theirs = await globex.submit_request(request(model, key))

    assert not theirs.reused
    assert theirs.job.id != mine.job.id


async def test_key_keeps_deduplicating_after_the_job_finished(api: Api, model: str) -> None:
    first = await api.submit_request(request(model, "key-1"))
    await api.run_to_completion(model, b"answer")

    again = await api.submit_request(request(model, "key-1"))

    assert again.reused
    assert again.job.id == first.job.id
    assert again.job.status == COMPLETED
    assert again.job.result == b"answer"


async def test_a_group_resubmitted_with_its_key_is_reused(api: Api, model: str) -> None:
    group = job_service_pb2.SubmitRequest(
        idempotency_key="g-1", group=job_pb2.GroupSpec(children=[spec(model), spec(model)])
    )
    first = await api.submit_request(group)

    again = await api.submit_request(group)

    assert again.reused and again.job.id == first.job.id
    assert len(await api.claim([model], max_jobs=10)) == 2


async def test_a_different_group_with_the_same_key_is_already_exists(api: Api, model: str) -> None:
    one = job_pb2.GroupSpec(children=[spec(model)])
    two = job_pb2.GroupSpec(children=[spec(model), spec(model)])
    await api.submit_request(job_service_pb2.SubmitRequest(idempotency_key="g-1", group=one))

    failure = await failure_of(
        api.submit_request(job_service_pb2.SubmitRequest(idempotency_key="g-1", group=two))
    )

    assert failure.code == grpc.StatusCode.ALREADY_EXISTS, failure
    assert failure.reason == "IDEMPOTENCY_KEY_REUSED"


async def test_a_batch_item_reuses_the_job_of_an_earlier_submit(api: Api, model: str) -> None:
    first = await api.submit_request(request(model, "key-1"))

    responses = await api.batch_submit(request(model, "key-2"), request(model, "key-1"))

    assert [response.reused for response in responses] == [False, True]
    assert responses[1].job.id == first.job.id
    assert len(await api.claim([model], max_jobs=5)) == 2


async def test_a_batch_item_reusing_a_key_for_another_request_creates_nothing(
    api: Api, model: str
) -> None:
    await api.submit_request(request(model, "key-1", b"one"))

    failure = await failure_of(
        api.batch_submit(request(model, "key-2"), request(model, "key-1", b"two"))
    )

    assert failure.code == grpc.StatusCode.ALREADY_EXISTS, failure
    assert failure.reason == "IDEMPOTENCY_KEY_REUSED"
    assert len(await api.claim([model], max_jobs=5)) == 1
    again = await api.submit_request(request(model, "key-2", b"other"))
    assert not again.reused  # the refused batch took no key
