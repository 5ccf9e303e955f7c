"""Errors map in one place: store errors keep their code and details; a bug is INTERNAL."""

from __future__ import annotations

import logging
import random
from typing import Any, cast

import grpc
import pytest
from google.protobuf import duration_pb2

from jobgate import InternalError, JobClient
from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from serving.settings import ServerSettings
from store.errors import StoreUnavailable
from store.front import StoreFront
from store.memory.engine import LocalEngine
from store.model import ClaimedJob, Job, StoreSettings
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, fails

UNKNOWN_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


class BrokenEngine(LocalEngine):
    """A LocalEngine whose get and claim raise `failure` while it is set (as its backend)."""

    failure: Exception | None = None
    gets = 0

    async def get(self, tenant: str | None, job_id: str, operation: str = "get") -> Job:
        self.gets += 1
        if self.failure is not None:
            raise self.failure
        return await super().get(tenant, job_id, operation)

    async def claim_now(self, worker_id: str, models: list[str], max_jobs: int) -> list[ClaimedJob]:
        if self.failure is not None:
            raise self.failure
        return await super().claim_now(worker_id, models, max_jobs)


class BrokenStore(StoreFront):
    """A LocalStore over a BrokenEngine."""

    engine: BrokenEngine

    def __init__(self, settings: StoreSettings) -> None:
        super().__init__(BrokenEngine(settings))

    @property
    def failure(self) -> Exception | None:
        return self.engine.failure

    @failure.setter
    def failure(self, value: Exception | None) -> None:
        self.engine.failure = value

    @property
    def gets(self) -> int:
        return self.engine.gets


async def test_unknown_job_is_not_found_with_reason(harness: Harness) -> None:
    failure = await fails(harness.job.Get(job_service_pb2.GetRequest(job_id=UNKNOWN_ID)))
    assert (failure.code, failure.reasons) == (grpc.StatusCode.NOT_FOUND, ["JOB_NOT_FOUND"])


async def test_key_reuse_is_already_exists(harness: Harness) -> None:
    await harness.submit("m", idempotency_key="k")
    failure = await fails(harness.submit("other", idempotency_key="k"))
    assert failure.code is grpc.StatusCode.ALREADY_EXISTS
    assert failure.reasons == ["IDEMPOTENCY_KEY_REUSED"]


async def test_quota_is_resource_exhausted_with_retry_info(make_harness: MakeHarness) -> None:
    harness = await make_harness(settings=ServerSettings(max_live_per_tenant=1))
    await harness.submit()
    failure = await fails(harness.submit())
    assert failure.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert failure.reasons == ["TENANT_QUOTA_EXCEEDED"]
    assert failure.retry_delay is not None and failure.retry_delay > 0


async def test_stale_lease_is_failed_precondition_lease_lost(harness: Harness) -> None:
    job = await harness.submit()
    await harness.claim()
    request = worker_service_pb2.HeartbeatRequest(job_id=job.id, lease_id="not-the-lease")
    failure = await fails(harness.worker.Heartbeat(request))
    assert (failure.code, failure.reasons) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        ["LEASE_LOST"],
    )


async def test_result_after_cancel_is_job_cancelled(harness: Harness) -> None:
    job = await harness.submit()
    [claimed] = await harness.claim()
    await harness.job.Cancel(job_service_pb2.CancelRequest(job_id=job.id))
    failure = await fails(harness.complete(claimed))
    assert failure.reasons == ["JOB_CANCELLED"]


async def test_store_unavailable_is_unavailable_with_retry_info(
    make_harness: MakeHarness,
) -> None:
    store = BrokenStore(StoreSettings())
    harness = await make_harness(store=store)
    store.failure = StoreUnavailable("redis is down")
    failure = await fails(harness.job.Get(job_service_pb2.GetRequest(job_id=UNKNOWN_ID)))
    assert (failure.code, failure.reasons) == (
        grpc.StatusCode.UNAVAILABLE,
        ["STORE_UNAVAILABLE"],
    )
    assert failure.retry_delay is not None
    assert await harness.value("jobgate_store_errors_total", {"operation": "get"}) == 1


async def test_store_unavailable_is_never_an_empty_claim(make_harness: MakeHarness) -> None:
    store = BrokenStore(StoreSettings())
    harness = await make_harness(store=store)
    store.failure = StoreUnavailable("redis is down")
    assert (await fails(harness.claim())).code is grpc.StatusCode.UNAVAILABLE


async def test_unexpected_exception_is_internal_not_unavailable(
    make_harness: MakeHarness,
) -> None:
    store = BrokenStore(StoreSettings())
    harness = await make_harness(store=store)
    store.failure = ZeroDivisionError("a bug")
    failure = await fails(harness.job.Get(job_service_pb2.GetRequest(job_id=UNKNOWN_ID)))
    assert failure.code is grpc.StatusCode.INTERNAL
    assert (failure.reasons, failure.retry_delay) == ([], None)


async def test_unexpected_exception_is_logged_once_with_its_trace(
    make_harness: MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    store = BrokenStore(StoreSettings())
    harness = await make_harness(store=store)
    store.failure = ZeroDivisionError("a bug")
    with caplog.at_level(logging.DEBUG):
        await fails(harness.job.Get(job_service_pb2.GetRequest(job_id=UNKNOWN_ID)))
    traced = [r for r in caplog.records if r.exc_info and r.exc_info[0] is ZeroDivisionError]
    assert len(traced) == 1


async def test_the_client_does_not_retry_an_internal_error(make_harness: MakeHarness) -> None:
    store = BrokenStore(StoreSettings())
    harness = await make_harness(store=store)
    store.failure = ZeroDivisionError("a bug")
    async with JobClient(f"127.0.0.1:{harness.job_port}") as client:
        with pytest.raises(InternalError):
            await client.get(UNKNOWN_ID)
    assert store.gets == 1


METHODS = [
    ("/jobgate.v1.JobService/Submit", False),
    ("/jobgate.v1.JobService/Get", False),
    ("/jobgate.v1.JobService/Cancel", False),
    ("/jobgate.v1.JobService/StreamStatus", True),
    ("/jobgate.v1.WorkerService/Heartbeat", False),
    ("/jobgate.v1.WorkerService/SetResult", False),
    ("/jobgate.v1.WorkerService/ClaimNext", False),
]


async def _raw_call(harness: Harness, method: str, stream: bool, body: bytes) -> grpc.StatusCode:
    channel = harness.worker_channel if "WorkerService" in method else harness.job_channel
    try:
        if stream:
            async for _ in channel.unary_stream(method, None, None)(body, timeout=5):
                pass
        else:
            await channel.unary_unary(method, None, None)(body, timeout=5)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_undecodable_request_is_invalid_argument(harness: Harness) -> None:
    # Field 1 (a string) declared 10 bytes long, 1 byte present.
    code = await _raw_call(harness, "/jobgate.v1.JobService/Get", False, b"\x0a\x0ax")
    assert code is grpc.StatusCode.INVALID_ARGUMENT


def _seed_bodies() -> list[bytes]:
    spec = job_pb2.JobSpec(model="m", payload=b"p", labels={"a": "b"}, max_attempts=2)
    return [
        job_service_pb2.SubmitRequest(idempotency_key="k", job=spec).SerializeToString(),
        job_service_pb2.SubmitRequest(
            group=job_pb2.GroupSpec(children=[spec, spec], max_parallel=1)
        ).SerializeToString(),
        worker_service_pb2.SetResultRequest(
            job_id=UNKNOWN_ID, lease_id="l", status=job_pb2.JOB_STATUS_FAILED
        ).SerializeToString(),
        worker_service_pb2.ClaimNextRequest(worker_id="w", models=["m"]).SerializeToString(),
    ]


def _mutate(rng: random.Random, body: bytes) -> bytes:
    data = bytearray(body)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.4 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif choice < 0.7:
            data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
        elif data:
            del data[rng.randrange(len(data))]
    return bytes(data)


async def test_fuzzed_requests_never_end_internal_or_unknown(harness: Harness) -> None:
    rng = random.Random(20261129)
    seeds = _seed_bodies()
    seen: set[grpc.StatusCode] = set()
    for _ in range(40):
        for method, stream in METHODS:
            if rng.random() < 0.5:
                body = _mutate(rng, rng.choice(seeds))
            else:
                body = rng.randbytes(rng.randint(0, 48))
            seen.add(await _raw_call(harness, method, stream, body))
    assert not seen & {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}, seen
    assert grpc.StatusCode.INVALID_ARGUMENT in seen


_ALPHABET = "az09._-#AZ \t\n\x00é🙂/"


def _text(rng: random.Random, longest: int = 140) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, longest)))


def _int(rng: random.Random) -> int:
    return rng.choice([0, 1, -1, 64, 65, 100, 101, 2**31 - 1, -(2**31), rng.randint(-9, 99)])


def _duration(rng: random.Random) -> duration_pb2.Duration:
    seconds = rng.choice([0, 1, -1, 60, 61, 10**9, rng.randint(-100, 100)])
    nanos = rng.choice([0, 1, -1, 999_999_999, rng.randint(-999_999_999, 999_999_999)])
    return duration_pb2.Duration(seconds=seconds, nanos=nanos)


def _spec(rng: random.Random) -> job_pb2.JobSpec:
    return job_pb2.JobSpec(
        model=rng.choice(["m", _text(rng, 70)]),
        payload=rng.randbytes(rng.randint(0, 64)),
        content_type=_text(rng, 300),
        labels={_text(rng, 70): _text(rng, 300) for _ in range(rng.randint(0, 3))},
        max_attempts=_int(rng),
        queue_timeout=_duration(rng),
        run_timeout=_duration(rng),
    )


def _random_calls(rng: random.Random, harness: Harness) -> list[Any]:
    job_id = rng.choice([UNKNOWN_ID, _text(rng, 30)])
    group = job_pb2.GroupSpec(
        children=[_spec(rng) for _ in range(rng.randint(0, 3))], max_parallel=_int(rng)
    )
    submit = job_service_pb2.SubmitRequest(
        idempotency_key=_text(rng), priority=cast(Any, _int(rng) % 8), job=_spec(rng)
    )
    if rng.random() < 0.3:
        submit.group.CopyFrom(group)
    claim = worker_service_pb2.ClaimNextRequest(
        worker_id=_text(rng),
        models=[rng.choice(["m", _text(rng, 70)]) for _ in range(rng.randint(0, 3))],
        wait=_duration(rng),
        max_jobs=_int(rng),
    )
    result = worker_service_pb2.SetResultRequest(
        job_id=job_id,
        lease_id=_text(rng),
        status=cast(Any, _int(rng) % 9),
        error_code=_text(rng, 70),
        error_message=_text(rng),
    )
    beat = worker_service_pb2.HeartbeatRequest(
        job_id=job_id,
        lease_id=_text(rng),
        progress=rng.choice([0.5, -0.1, 2.0, float("nan"), float("inf")]),
        stage=_text(rng),
    )
    return [
        harness.job.Submit(submit, timeout=2),
        harness.job.Get(job_service_pb2.GetRequest(job_id=job_id), timeout=2),
        harness.job.Cancel(job_service_pb2.CancelRequest(job_id=job_id), timeout=2),
        harness.worker.ClaimNext(claim, timeout=0.5),
        harness.worker.SetResult(result, timeout=2),
        harness.worker.Heartbeat(beat, timeout=2),
    ]


async def test_random_field_values_never_end_internal_or_unknown(harness: Harness) -> None:
    rng = random.Random(7)
    seen: set[grpc.StatusCode] = set()
    for _ in range(30):
        for call in _random_calls(rng, harness):
            try:
                await call
                seen.add(grpc.StatusCode.OK)
            except grpc.aio.AioRpcError as error:
                seen.add(error.code())
    assert not seen & {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}, seen
