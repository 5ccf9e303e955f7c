"""JobClient.batch_submit: one BatchSubmit call, every item keyed, retried like Submit."""

from __future__ import annotations

import asyncio

import pytest
from google.rpc import code_pb2

from jobgate import IdempotencyKeyReusedError, JobClient, SyncJobClient, job_spec
from jobgate.v1 import job_service_pb2
from tests.client.fake_job_service import UNAVAILABLE, Fail, FakeJobService

Fake = tuple[FakeJobService, str]


def requests(*keys: str) -> list[job_service_pb2.SubmitRequest]:
    return [
        job_service_pb2.SubmitRequest(idempotency_key=key, job=job_spec("m", f"p{i}"))
        for i, key in enumerate(keys)
    ]


async def test_batch_submit_sends_every_item_in_one_call_and_answers_in_order(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake

    responses = await client.batch_submit(requests("a", "b", "c"))

    assert [response.job.id for response in responses] == ["01JOB0", "01JOB1", "01JOB2"]
    [call] = service.calls("BatchSubmit")
    assert [item.job.payload for item in call.request.requests] == [b"p0", b"p1", b"p2"]


async def test_batch_submit_keeps_the_callers_keys_and_keys_the_rest(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake

    await client.batch_submit(requests("mine", "", ""))

    keys = [item.idempotency_key for item in service.calls("BatchSubmit")[0].request.requests]
    assert keys[0] == "mine"
    assert keys[1] and keys[2] and keys[1] != keys[2]


async def test_a_batch_retry_resends_the_same_generated_keys(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.script("BatchSubmit", UNAVAILABLE)

    await client.batch_submit(requests("", ""))

    first, second = service.calls("BatchSubmit")
    assert first.request == second.request


async def test_a_refused_batch_raises_with_the_items_field_violation(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    refusal = Fail(
        code_pb2.ALREADY_EXISTS,
        "IDEMPOTENCY_KEY_REUSED",
        violations=[("requests[1].idempotency_key", "used for a different request")],
    )
    service.script("BatchSubmit", refusal)

    with pytest.raises(IdempotencyKeyReusedError) as raised:
        await client.batch_submit(requests("a", "a"))

    assert [v.field for v in raised.value.field_violations] == ["requests[1].idempotency_key"]


async def test_sync_client_batch_submits(fake: Fake) -> None:
    _, target = fake

    def use_sync_client() -> list[job_service_pb2.SubmitResponse]:
        # In a thread: the fake server runs on this test's event loop.
        with SyncJobClient(target) as client:
            return client.batch_submit(requests("a", "b"))

    responses = await asyncio.to_thread(use_sync_client)

    assert len(responses) == 2
