"""JobClient retries: which codes, how long it waits, and the deadline over all attempts."""

from __future__ import annotations

import time

import pytest
from google.rpc import code_pb2

from jobgate import (
    DeadlineExceededError,
    JobClient,
    JobNotFoundError,
    QuotaExceededError,
    RetryPolicy,
    UnavailableError,
)
from tests.client.fake_job_service import UNAVAILABLE, Fail, FakeJobService, Hang
from tests.timings import Timings

Fake = tuple[FakeJobService, str]


async def test_submit_retries_unavailable_until_it_succeeds(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.script("Submit", UNAVAILABLE, UNAVAILABLE)

    job = await client.submit("m", b"x")

    assert job.id == "01JOB"
    assert len(service.calls("Submit")) == 3


async def test_submit_retries_a_cancel_from_a_server_shutting_down(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.script("Submit", Fail(code_pb2.CANCELLED))

    job = await client.submit("m", b"x")

    assert job.id == "01JOB"
    keys = {seen.request.idempotency_key for seen in service.calls("Submit")}
    assert len(service.calls("Submit")) == 2 and len(keys) == 1


async def test_every_submit_retry_carries_the_same_generated_idempotency_key(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.script("Submit", UNAVAILABLE, UNAVAILABLE)

    await client.submit("m", b"x")

    keys = {seen.request.idempotency_key for seen in service.calls("Submit")}
    assert len(keys) == 1 and keys != {""}


async def test_each_submit_without_a_key_gets_a_different_key(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake

    await client.submit("m", b"x")
    await client.submit("m", b"x")

    first, second = (seen.request.idempotency_key for seen in service.calls("Submit"))
    assert first != second


async def test_the_callers_idempotency_key_is_sent_unchanged(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.script("Submit", UNAVAILABLE)

    await client.submit("m", b"x", idempotency_key="order-42")

    assert [s.request.idempotency_key for s in service.calls("Submit")] == ["order-42"] * 2


async def test_retry_waits_at_least_the_servers_retry_info_delay(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    quota = Fail(code_pb2.RESOURCE_EXHAUSTED, "TENANT_QUOTA_EXCEEDED", retry_delay=0.4)
    service.script("Submit", quota)

    await client.submit("m", b"x")

    first, second = service.calls("Submit")
    assert second.at - first.at >= 0.4


async def test_backoff_between_retries_grows_and_stays_jittered() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=1.0, multiplier=2.0)

    delays = [[policy.delay(retry) for _ in range(200)] for retry in (1, 2, 3, 6)]

    for (low, high), samples in zip(
        [(0.05, 0.1), (0.1, 0.2), (0.2, 0.4), (0.5, 1.0)], delays, strict=True
    ):
        assert all(low <= d <= high for d in samples)
        assert len(set(samples)) > 100  # jittered, not a fixed schedule


async def test_gives_up_after_max_attempts_with_the_last_error(fake: Fake) -> None:
    service, target = fake
    service.script("Get", *[UNAVAILABLE] * 5)
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02)

    async with JobClient(target, retry=policy) as client:
        with pytest.raises(UnavailableError) as raised:
            await client.get("01JOB")

    assert raised.value.reason == "STORE_UNAVAILABLE"
    assert len(service.calls("Get")) == 3


async def test_a_retry_that_would_end_past_the_deadline_is_not_attempted(
    fake: Fake, client: JobClient, timings: Timings
) -> None:
    service, _ = fake
    quota = Fail(code_pb2.RESOURCE_EXHAUSTED, "TENANT_QUOTA_EXCEEDED", retry_delay=5.0)
    service.script("Submit", quota)

    started = time.monotonic()
    with pytest.raises(QuotaExceededError):
        await client.submit("m", b"x", timeout=1.0)

    assert len(service.calls("Submit")) == 1
    # Given up at once, far below the 5 s the server asked for (the bench's bound).
    timings("client: a retry past the deadline gives up", time.monotonic() - started)


async def test_the_deadline_covers_all_attempts_together(fake: Fake, timings: Timings) -> None:
    service, target = fake
    service.script("Get", UNAVAILABLE, Hang())
    # A back-off of 0.2-0.4 s: long enough to see in the deadline the server is given.
    policy = RetryPolicy(max_attempts=4, initial_backoff=0.4, max_backoff=0.4)

    started = time.monotonic()
    async with JobClient(target, retry=policy) as client:
        with pytest.raises(DeadlineExceededError):
            await client.get("01JOB", timeout=1.5)
    elapsed = time.monotonic() - started

    # The hanging second attempt was cut at the call's deadline, not given 1.5 s
    # of its own: the deadline told the server so (below); how soon the call
    # ended after the deadline is the bench's bound.
    assert elapsed >= 1.4
    timings("client: a call ends past its deadline", elapsed - 1.5, "two attempts, one hung")
    first, second = service.calls("Get")
    assert first.time_remaining is not None and second.time_remaining is not None
    assert second.time_remaining < first.time_remaining - 0.15


async def test_errors_that_a_retry_cannot_fix_are_raised_at_once(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.script("Get", Fail(code_pb2.NOT_FOUND, "JOB_NOT_FOUND", metadata={"job_id": "nope"}))

    with pytest.raises(JobNotFoundError):
        await client.get("nope")

    assert len(service.calls("Get")) == 1


async def test_cancel_and_get_are_retried_like_submit(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.script("Cancel", UNAVAILABLE)

    response = await client.cancel("01JOB", "no longer needed")

    assert response.cancelled
    assert [s.request.reason for s in service.calls("Cancel")] == ["no longer needed"] * 2
