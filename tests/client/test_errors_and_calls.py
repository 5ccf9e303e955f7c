"""Typed exceptions carry the server's ErrorInfo; credentials travel as metadata; watch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.rpc import code_pb2

import jobgate
import jobgate.errors
from jobgate import (
    CallCancelledError,
    IdempotencyKeyReusedError,
    InternalError,
    InvalidArgumentError,
    JobClient,
    JobgateError,
    JobNotFoundError,
    QueueFullError,
    QuotaExceededError,
    RetryPolicy,
    SyncJobClient,
    UnavailableError,
)
from jobgate.errors import JobNotRetryableError, PoolNotAllowedError
from jobgate.v1 import job_pb2
from tests.client.fake_job_service import UNAVAILABLE, Fail, FakeJobService, job

Fake = tuple[FakeJobService, str]
Module = Any
NO_RETRY = RetryPolicy(max_attempts=1)


@pytest.mark.parametrize(
    ("fail", "expected"),
    [
        (Fail(code_pb2.NOT_FOUND, "JOB_NOT_FOUND"), JobNotFoundError),
        (Fail(code_pb2.ALREADY_EXISTS, "IDEMPOTENCY_KEY_REUSED"), IdempotencyKeyReusedError),
        (Fail(code_pb2.RESOURCE_EXHAUSTED, "TENANT_QUOTA_EXCEEDED", 1.5), QuotaExceededError),
        (Fail(code_pb2.RESOURCE_EXHAUSTED, "QUEUE_FULL", 1.5), QueueFullError),
        (Fail(code_pb2.UNAVAILABLE, "SHUTTING_DOWN", 1.5), UnavailableError),
        (Fail(code_pb2.PERMISSION_DENIED, "POOL_NOT_ALLOWED"), PoolNotAllowedError),
        (Fail(code_pb2.FAILED_PRECONDITION, "JOB_NOT_RETRYABLE"), JobNotRetryableError),
        (Fail(code_pb2.INTERNAL), InternalError),
        (Fail(code_pb2.CANCELLED), CallCancelledError),
    ],
)
async def test_each_reason_raises_its_own_exception_class(
    fake: Fake, fail: Fail, expected: type[JobgateError]
) -> None:
    service, target = fake
    service.script("Submit", fail)

    async with JobClient(target, retry=NO_RETRY) as client:
        with pytest.raises(expected) as raised:
            await client.submit("m", b"x")

    assert isinstance(raised.value, JobgateError)
    assert raised.value.reason == fail.reason
    assert raised.value.retry_delay == fail.retry_delay


async def test_error_metadata_comes_from_error_info(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.script("Get", Fail(code_pb2.NOT_FOUND, "JOB_NOT_FOUND", metadata={"job_id": "X"}))

    with pytest.raises(JobNotFoundError) as raised:
        await client.get("X")

    assert raised.value.metadata == {"job_id": "X"}
    assert "JOB_NOT_FOUND" in str(raised.value)


async def test_invalid_argument_carries_the_field_violations(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    bad = Fail(code_pb2.INVALID_ARGUMENT, violations=[("job.model", "must match [a-z0-9]...")])
    service.script("Submit", bad)

    with pytest.raises(InvalidArgumentError) as raised:
        await client.submit("Bad Model", b"x")

    [violation] = raised.value.field_violations
    assert violation.field == "job.model"
    assert "job.model" in str(raised.value)


async def test_an_unreachable_server_is_unavailable_error(fake: Fake) -> None:
    async with JobClient("127.0.0.1:1", retry=NO_RETRY, timeout=2.0) as client:
        with pytest.raises(UnavailableError):
            await client.get("X")


async def test_token_and_tenant_travel_as_call_metadata(fake: Fake) -> None:
    service, target = fake

    async with JobClient(target, token="s3cret", tenant="acme") as client:
        await client.get("X")

    [seen] = service.calls("Get")
    assert seen.metadata["authorization"] == "Bearer s3cret"
    assert seen.metadata["x-jobgate-tenant"] == "acme"


async def test_environment_supplies_target_token_and_tenant(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, target = fake
    monkeypatch.setenv("JOBGATE_TARGET", target)
    monkeypatch.setenv("JOBGATE_TOKEN", "from-env")
    monkeypatch.setenv("JOBGATE_TENANT", "env-tenant")

    async with JobClient() as client:
        await client.get("X")

    [seen] = service.calls("Get")
    assert seen.metadata["authorization"] == "Bearer from-env"
    assert seen.metadata["x-jobgate-tenant"] == "env-tenant"


async def test_submit_sends_the_whole_spec(fake: Fake, client: JobClient) -> None:
    service, _ = fake

    await client.submit(
        "text-stats",
        "hello",
        labels={"team": "a"},
        priority="interactive",
        max_attempts=5,
        run_timeout=60,
    )

    request = service.calls("Submit")[0].request
    assert request.priority == job_pb2.PRIORITY_INTERACTIVE
    assert request.job.model == "text-stats"
    assert request.job.payload == b"hello"
    assert request.job.content_type.startswith("text/plain")
    assert dict(request.job.labels) == {"team": "a"}
    assert request.job.max_attempts == 5
    assert request.job.run_timeout.seconds == 60


async def test_submit_asks_for_the_pool_it_is_given(fake: Fake, client: JobClient) -> None:
    service, _ = fake

    await client.submit("text-stats", "hello", pool="onprem")

    assert service.calls("Submit")[0].request.job.pool == "onprem"


def test_a_job_spec_without_a_pool_may_run_in_any_pool() -> None:
    assert jobgate.job_spec("m").pool == ""
    assert jobgate.job_spec("m", pool="gpu-a").pool == "gpu-a"


async def test_watch_yields_snapshots_until_the_terminal_one(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.streams.append(
        [
            job(status=job_pb2.JOB_STATUS_QUEUED),
            job(status=job_pb2.JOB_STATUS_PROCESSING, progress=0.5),
            job(status=job_pb2.JOB_STATUS_COMPLETED, progress=1.0),
        ]
    )

    seen = [snapshot.status async for snapshot in client.watch("01JOB")]

    assert seen == [
        job_pb2.JOB_STATUS_QUEUED,
        job_pb2.JOB_STATUS_PROCESSING,
        job_pb2.JOB_STATUS_COMPLETED,
    ]


async def test_watch_reopens_a_stream_broken_by_unavailable(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.streams.append([job(status=job_pb2.JOB_STATUS_PROCESSING), UNAVAILABLE])
    service.streams.append([job(status=job_pb2.JOB_STATUS_COMPLETED)])

    done = await client.wait_for_result("01JOB")

    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert len(service.calls("StreamStatus")) == 2


async def test_wait_for_result_respects_its_timeout(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.streams.append([job(status=job_pb2.JOB_STATUS_PROCESSING)])
    service.streams.extend([] for _ in range(50))  # the stream keeps ending without news

    with pytest.raises(JobgateError):
        await asyncio.wait_for(client.wait_for_result("01JOB", timeout=0.5), timeout=3)


async def test_sync_client_submits_and_watches(fake: Fake) -> None:
    service, target = fake
    service.streams.append([job(status=job_pb2.JOB_STATUS_COMPLETED, result=b"ok")])

    def use_sync_client() -> job_pb2.Job:
        # In a thread: the fake server runs on this test's event loop.
        with SyncJobClient(target) as client:
            submitted = client.submit("m", b"x")
            return client.wait_for_result(submitted.id)

    done = await asyncio.to_thread(use_sync_client)

    assert done.result == b"ok"


@pytest.mark.parametrize("module", [jobgate, jobgate.errors], ids=["jobgate", "jobgate.errors"])
def test_cancelled_error_is_a_deprecated_alias_of_call_cancelled_error(module: Module) -> None:
    with pytest.warns(DeprecationWarning, match="CallCancelledError"):
        old = module.CancelledError
    assert old is CallCancelledError


def test_call_cancelled_error_does_not_shadow_asyncios() -> None:
    assert "CancelledError" not in jobgate.__all__
    assert not issubclass(CallCancelledError, asyncio.CancelledError)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = jobgate.NoSuchError


async def test_a_reason_of_another_domain_is_not_taken_for_ours(fake: Fake) -> None:
    service, target = fake
    service.script("Get", Fail(code_pb2.UNAVAILABLE, "LEASE_LOST", domain="example.com"))

    async with JobClient(target, retry=NO_RETRY) as client:
        with pytest.raises(UnavailableError) as raised:
            await client.get("01ARZ3NDEKTSV4RRFFQ69G5FAV")

    assert raised.value.reason == ""
