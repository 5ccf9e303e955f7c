"""No request can produce INTERNAL or UNKNOWN (issue 4, item 4), fuzzed over the wire.

Hypothesis builds arbitrary requests for every RPC: odd unicode, huge and
negative numbers, unknown enum values, NaN, out-of-range durations. Every
answer must be a deliberate one; an INVALID_ARGUMENT must carry BadRequest
violations. Derandomized, so a run is reproducible.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from tests.e2e.harness import Deployment

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NEVER = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
texts = st.text(max_size=300)
short_texts = st.one_of(st.text(max_size=70), st.sampled_from(["", "ok-model", "m.1_x-y"]))


def durations(max_seconds: int = 2**40) -> st.SearchStrategy[duration_pb2.Duration]:
    return st.builds(
        duration_pb2.Duration,
        seconds=st.integers(-max_seconds, max_seconds),
        nanos=st.integers(-(2**31), 2**31 - 1),
    )


specs = st.builds(
    job_pb2.JobSpec,
    model=short_texts,
    payload=st.binary(max_size=2000),
    content_type=texts,
    labels=st.dictionaries(short_texts, texts, max_size=70),
    max_attempts=INT32,
    queue_timeout=durations(),
    run_timeout=durations(),
)
submits = st.one_of(
    st.builds(job_service_pb2.SubmitRequest, idempotency_key=texts, priority=INT32, job=specs),
    st.builds(
        job_service_pb2.SubmitRequest,
        idempotency_key=texts,
        priority=INT32,
        group=st.builds(
            job_pb2.GroupSpec, children=st.lists(specs, max_size=5), max_parallel=INT32
        ),
    ),
    st.just(job_service_pb2.SubmitRequest()),
)
ids = st.one_of(texts, st.just("01ARZ3NDEKTSV4RRFFQ69G5FAV"))
# A valid claim waits for its whole `wait`: keep valid waits at zero, and
# fuzz only invalid ones (negative or over 60 s) beyond that.
claim_waits = st.one_of(
    st.just(duration_pb2.Duration()),
    st.builds(duration_pb2.Duration, seconds=st.integers(-(2**40), -1)),
    st.builds(duration_pb2.Duration, seconds=st.integers(61, 2**40)),
    st.builds(duration_pb2.Duration, seconds=st.just(0), nanos=st.integers(-(2**31), -1)),
)
claims = st.builds(
    worker_service_pb2.ClaimNextRequest,
    worker_id=texts,
    models=st.lists(short_texts, max_size=40),
    wait=claim_waits,
    max_jobs=INT32,
)
heartbeats = st.builds(
    worker_service_pb2.HeartbeatRequest,
    job_id=ids,
    lease_id=texts,
    progress=st.floats(allow_nan=True, allow_infinity=True),
    stage=texts,
)
results = st.builds(
    worker_service_pb2.SetResultRequest,
    job_id=ids,
    lease_id=texts,
    status=INT32,
    result=st.binary(max_size=2000),
    result_content_type=texts,
    error_code=texts,
    error_message=st.text(max_size=5000),
    retryable=st.booleans(),
)

exchanges = st.builds(
    worker_service_pb2.ReportAndClaimRequest,
    worker_id=texts,
    models=st.lists(short_texts, max_size=40),
    wait=claim_waits,
    max_jobs=INT32,
    results=st.lists(results, max_size=4),
    heartbeats=st.lists(heartbeats, max_size=4),
)
batches = st.builds(job_service_pb2.BatchSubmitRequest, requests=st.lists(submits, max_size=4))


def assert_deliberate(call: Callable[[], Any], request: Any) -> None:
    try:
        call()
    except grpc.RpcError as error:
        code = error.code()
        assert code not in NEVER, f"{code} for {request!r}: {error.details()}"
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            status = rpc_status.from_call(error)  # type: ignore[arg-type]
            assert status is not None, f"INVALID_ARGUMENT without details for {request!r}"
            assert any(d.Is(error_details_pb2.BadRequest.DESCRIPTOR) for d in status.details)


def tenant() -> tuple[tuple[str, str], ...]:
    return (("x-jobgate-tenant", f"fuzz-{uuid.uuid4().hex[:8]}"),)


def test_fuzzed_job_service_requests_never_fail_internally(deployment: Deployment) -> None:
    metadata = tenant()
    with grpc.insecure_channel(deployment.job_target) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)

        @FUZZ
        @given(submit=submits, batch=batches, job_id=ids, reason=st.text(max_size=1100))
        def check(submit: Any, batch: Any, job_id: str, reason: str) -> None:
            assert_deliberate(lambda: stub.Submit(submit, metadata=metadata, timeout=10), submit)
            assert_deliberate(lambda: stub.BatchSubmit(batch, metadata=metadata, timeout=10), batch)
            get = job_service_pb2.GetRequest(job_id=job_id)
            assert_deliberate(lambda: stub.Get(get, metadata=metadata, timeout=10), get)
            cancel = job_service_pb2.CancelRequest(job_id=job_id, reason=reason)
            assert_deliberate(lambda: stub.Cancel(cancel, metadata=metadata, timeout=10), cancel)
            stream = job_service_pb2.StreamStatusRequest(job_id=job_id)
            assert_deliberate(
                lambda: list(stub.StreamStatus(stream, metadata=metadata, timeout=10)), stream
            )

        check()


def test_fuzzed_worker_service_requests_never_fail_internally(deployment: Deployment) -> None:
    with grpc.insecure_channel(deployment.worker_target) as channel:
        stub = worker_service_pb2_grpc.WorkerServiceStub(channel)

        @FUZZ
        @given(claim=claims, heartbeat=heartbeats, result=results, exchange=exchanges)
        def check(claim: Any, heartbeat: Any, result: Any, exchange: Any) -> None:
            assert_deliberate(lambda: stub.ClaimNext(claim, timeout=10), claim)
            assert_deliberate(lambda: stub.Heartbeat(heartbeat, timeout=10), heartbeat)
            assert_deliberate(lambda: stub.SetResult(result, timeout=10), result)
            assert_deliberate(lambda: stub.ReportAndClaim(exchange, timeout=10), exchange)

        check()


METHODS = [
    ("job", "/jobgate.v1.JobService/Submit"),
    ("job", "/jobgate.v1.JobService/Get"),
    ("job", "/jobgate.v1.JobService/Cancel"),
    ("job", "/jobgate.v1.JobService/BatchSubmit"),
    ("worker", "/jobgate.v1.WorkerService/ClaimNext"),
    ("worker", "/jobgate.v1.WorkerService/ReportAndClaim"),
    ("worker", "/jobgate.v1.WorkerService/Heartbeat"),
    ("worker", "/jobgate.v1.WorkerService/SetResult"),
]
# Field 1 (a string in every request above) holding bytes that are not UTF-8,
# as a client in another language could send; plus truncated and junk bytes.
UNDECODABLE = [b"\x0a\x02\xff\xfe", b"\x0a\x05ab", b"\xff\xff\xff\xff", b"\x08"]


def test_undecodable_requests_never_fail_internally(deployment: Deployment) -> None:
    targets = {"job": deployment.job_target, "worker": deployment.worker_target}
    for service, method in METHODS:
        with grpc.insecure_channel(targets[service]) as channel:
            call = channel.unary_unary(method, None, None)
            for body in UNDECODABLE:
                send = functools.partial(call, body, metadata=tenant(), timeout=10)
                assert_deliberate(send, body)
