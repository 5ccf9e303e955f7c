"""No request can produce INTERNAL or UNKNOWN (issue 4, item 4), fuzzed over the wire.

Hypothesis builds arbitrary requests for every RPC: odd unicode, huge and
negative numbers, unknown enum values, NaN, out-of-range durations; and about
half the Submits and BatchSubmits valid but unusual (every field at or near its
documented limit, idempotency keys reused), so they reach the store. Every
answer must be a deliberate one; an INVALID_ARGUMENT must carry BadRequest
violations; an idempotency key names one job for the whole run. Derandomized,
so a run is reproducible.
"""

from __future__ import annotations

import copy
import functools
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway_server import validate
from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from jobgate.v1.limits import (
    MAX_ATTEMPTS,
    MAX_CONTENT_TYPE_BYTES,
    MAX_DURATION_SECONDS,
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_LABEL_KEY_BYTES,
    MAX_LABEL_VALUE_BYTES,
    MAX_LABELS,
    MODEL_PATTERN,
)
from serving.settings import ServerSettings
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
# Mostly invalid: fuzzed fields almost never pass validation.
invalid_submits = st.one_of(
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

# ---------------------------------------------------------------- valid but unusual
# Requests inside every documented limit (jobgate/v1/limits.py, DESIGN's server
# defaults), at and near the edges, so they reach the store: odd labels, content
# types, max_attempts, timeouts, priorities, idempotency keys reused with the same
# body (answered with the original, reused=true) or another (ALREADY_EXISTS),
# payloads at the size cap, groups at the children cap with any max_parallel.

#: The caps of a deployment run with default settings (the shared e2e one).
DEFAULTS = ServerSettings()
T = TypeVar("T")


def rarely(
    common: st.SearchStrategy[T], rare: st.SearchStrategy[T], one_in: int
) -> st.SearchStrategy[T]:
    """`rare` about once in `one_in` draws, else `common`. The rare pick is a middle
    value: hypothesis draws a range's ends far more often than the rest."""
    return st.integers(0, one_in - 1).flatmap(lambda n: rare if n == one_in // 2 else common)


def utf8_text(max_bytes: int, min_size: int = 0) -> st.SearchStrategy[str]:
    """Short text of any code points, or text of exactly `max_bytes` UTF-8 bytes."""
    at_cap = ["x" * max_bytes, "é" * (max_bytes // 2) + "x" * (max_bytes % 2)]
    at_cap.append("😀" * (max_bytes // 4) + "x" * (max_bytes % 4))
    return st.one_of(
        st.text(min_size=min_size, max_size=min(16, max_bytes // 4)), st.sampled_from(at_cap)
    )


def valid_durations() -> st.SearchStrategy[duration_pb2.Duration]:
    """0 (the server default), a nanosecond, whole and fractional, up to the cap exactly."""
    cap = MAX_DURATION_SECONDS
    edges = [(0, 0), (0, 1), (0, 999_999_999), (1, 0), (cap - 1, 999_999_999), (cap, 0)]
    return st.one_of(
        st.sampled_from(edges).map(lambda e: duration_pb2.Duration(seconds=e[0], nanos=e[1])),
        st.builds(
            duration_pb2.Duration,
            seconds=st.integers(0, cap - 1),
            nanos=st.integers(0, 999_999_999),
        ),
    )


#: Mostly a few odd names: a model new to a Redis store costs its Submit a round
#: to declare the model's keys, so fresh names (from the pattern) come rarely.
valid_models = rarely(
    st.sampled_from(["ok-model", "0", "a" * 64, "z.-_9", "m.1_x-y"]),
    st.from_regex(MODEL_PATTERN, fullmatch=True),
    one_in=8,
)
label_keys = utf8_text(MAX_LABEL_KEY_BYTES, min_size=1)
label_values = utf8_text(MAX_LABEL_VALUE_BYTES)
#: At most MAX_LABELS entries; a full set is built, not drawn (drawing 64 is slow).
valid_labels = rarely(
    st.dictionaries(label_keys, label_values, max_size=4),
    st.builds(
        lambda key, value: {key: value} | {f"k{i}": str(i) for i in range(MAX_LABELS - 1)},
        label_keys,
        label_values,
    ),
    one_in=10,
)
#: Printable ASCII, 1 to MAX_IDEMPOTENCY_KEY_BYTES characters; mostly unique ones
#: (hypothesis replays earlier values, so drawn text keys often come back).
_serial = itertools.count()
fresh_keys = st.one_of(
    st.builds(lambda: f"fuzz key ~{next(_serial)}!"),
    st.uuids().map(str),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=40),
    st.just("~" * MAX_IDEMPOTENCY_KEY_BYTES),
)
#: Requests sent again and again with the same key and body: reused=true after the
#: first. Their keys also go out with other bodies (ALREADY_EXISTS), and one names
#: what a group's child key looks like (`<parent key>#<index>`).
_REPEATED_SPEC = job_pb2.JobSpec(model="ok-model", payload=b"same", labels={"same": "body"})
REPEATED = (
    job_service_pb2.SubmitRequest(idempotency_key="fuzz-same-job", job=_REPEATED_SPEC),
    job_service_pb2.SubmitRequest(
        idempotency_key="fuzz-same-group",
        priority=job_pb2.PRIORITY_INTERACTIVE,
        group=job_pb2.GroupSpec(children=[_REPEATED_SPEC, _REPEATED_SPEC], max_parallel=1),
    ),
)
reused_keys = st.sampled_from([r.idempotency_key for r in REPEATED] + ["fuzz-same-group#0"])
idempotency_keys = rarely(st.one_of(st.just(""), fresh_keys), reused_keys, one_in=10)
valid_priorities = st.sampled_from(sorted(job_pb2.Priority.values()))


def light(spec: job_pb2.JobSpec) -> job_pb2.JobSpec:
    """`spec` without its payload and labels: a copy to repeat up to a count cap."""
    copied = copy.deepcopy(spec)
    copied.ClearField("payload")
    copied.ClearField("labels")
    return copied


def valid_specs(
    models: st.SearchStrategy[str], max_payload_bytes: int
) -> st.SearchStrategy[job_pb2.JobSpec]:
    sizes = st.sampled_from([max_payload_bytes - 1, max_payload_bytes])
    payloads = rarely(st.binary(max_size=64), sizes.map(bytes), one_in=20)
    return st.builds(
        job_pb2.JobSpec,
        model=models,
        payload=payloads,
        content_type=utf8_text(MAX_CONTENT_TYPE_BYTES),
        labels=valid_labels,
        max_attempts=st.one_of(st.sampled_from([0, 1, MAX_ATTEMPTS]), st.integers(0, MAX_ATTEMPTS)),
        queue_timeout=valid_durations(),
        run_timeout=valid_durations(),
    )


def valid_groups(
    specs: st.SearchStrategy[job_pb2.JobSpec], max_children: int
) -> st.SearchStrategy[job_pb2.GroupSpec]:
    """1 to 5 children, or exactly `max_children` (copies of one); any max_parallel."""
    few = st.lists(specs, min_size=1, max_size=min(5, max_children))
    full = specs.map(lambda spec: [light(spec)] * max_children)
    return st.builds(
        job_pb2.GroupSpec,
        children=rarely(few, full, one_in=20),
        max_parallel=st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 2**31 - 1)),
    )


def valid_submits(
    models: st.SearchStrategy[str] = valid_models,
    max_payload_bytes: int = DEFAULTS.max_payload_bytes,
    max_children: int = DEFAULTS.max_group_children,
) -> st.SearchStrategy[job_service_pb2.SubmitRequest]:
    """Submits the gateway accepts (validation passes; the store may still answer
    ALREADY_EXISTS for a reused key): a job, a group, or a REPEATED one."""
    specs = valid_specs(models, max_payload_bytes)
    new = st.one_of(
        st.builds(
            job_service_pb2.SubmitRequest,
            idempotency_key=idempotency_keys,
            priority=valid_priorities,
            job=specs,
        ),
        st.builds(
            job_service_pb2.SubmitRequest,
            idempotency_key=idempotency_keys,
            priority=valid_priorities,
            group=valid_groups(specs, max_children),
        ),
    )
    return rarely(new, st.sampled_from(REPEATED).map(copy.deepcopy), one_in=6)


def valid_batches(
    models: st.SearchStrategy[str] = valid_models,
    max_payload_bytes: int = DEFAULTS.max_payload_bytes,
    max_children: int = DEFAULTS.max_group_children,
    max_batch: int = DEFAULTS.max_batch_submit,
) -> st.SearchStrategy[job_service_pb2.BatchSubmitRequest]:
    """1 to 4 valid items, or exactly `max_batch` keyless copies of one job."""
    items = valid_submits(models, max_payload_bytes, max_children)
    few = st.lists(items, min_size=1, max_size=min(4, max_batch))
    keyless = st.builds(
        job_service_pb2.SubmitRequest,
        priority=valid_priorities,
        job=valid_specs(models, max_payload_bytes).map(light),
    )
    full = keyless.map(lambda item: [item] * max_batch)
    return st.builds(job_service_pb2.BatchSubmitRequest, requests=rarely(few, full, one_in=50))


def half_and_half(
    invalid: st.SearchStrategy[T], valid: st.SearchStrategy[T]
) -> st.SearchStrategy[T]:
    """`valid` about half the time (st.one_of would flatten `invalid`'s branches and
    give `valid` only its one share among them)."""
    return st.booleans().flatmap(lambda ok: valid if ok else invalid)


submits = half_and_half(invalid_submits, valid_submits())
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
batches = half_and_half(
    st.builds(job_service_pb2.BatchSubmitRequest, requests=st.lists(submits, max_size=4)),
    valid_batches(),
)


def assert_deliberate(call: Callable[[], Any], request: Any) -> Any:
    """`call`'s answer, or None when it was refused (deliberately: never INTERNAL/UNKNOWN,
    and INVALID_ARGUMENT carries BadRequest violations)."""
    return answer_or_code(call, request)[0]


def answer_or_code(call: Callable[[], Any], request: Any) -> tuple[Any, grpc.StatusCode | None]:
    """As assert_deliberate: (the answer, None), or (None, the deliberate refusal's code)."""
    try:
        return call(), None
    except grpc.RpcError as error:
        code = error.code()
        assert code not in NEVER, f"{code} for {request!r}: {error.details()}"
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            status = rpc_status.from_call(error)  # type: ignore[arg-type]
            assert status is not None, f"INVALID_ARGUMENT without details for {request!r}"
            assert any(d.Is(error_details_pb2.BadRequest.DESCRIPTOR) for d in status.details)
        return None, code


def body(request: job_service_pb2.SubmitRequest) -> bytes:
    return request.SerializeToString(deterministic=True)


@dataclass
class KeyBook:
    """One tenant's fuzzed Submits and BatchSubmits that created or reused jobs.

    An idempotency key names one job for the whole run: once a key has created
    a job, an answer to it is that job with reused=true (or ALREADY_EXISTS for
    another body), never a second job; the exact same Submit again is reused;
    a key never seen before is never `reused`.
    """

    #: Key -> (its job, the body that created it).
    keys: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    #: Jobs created (groups by their parent), in order.
    created: list[str] = field(default_factory=list)
    reused: int = 0
    #: Submits and BatchSubmits sent, how many passed validation (answered, or refused
    #: by the store: ALREADY_EXISTS, a cap), and how many were answered OK.
    sent: int = 0
    valid: int = 0
    answered: int = 0

    def count(self, code: grpc.StatusCode | None) -> None:
        self.sent += 1
        self.valid += code != grpc.StatusCode.INVALID_ARGUMENT
        self.answered += code is None

    def submit(
        self,
        send: Callable[[], job_service_pb2.SubmitResponse],
        request: job_service_pb2.SubmitRequest,
    ) -> None:
        seen = self.keys.get(request.idempotency_key) if request.idempotency_key else None
        answer, code = answer_or_code(send, request)
        self.count(code)
        if answer is None:
            assert seen is None or seen[1] != body(request), (
                f"same Submit again refused: {request!r}"
            )
            return
        self.note(request, answer)

    def batch_submit(
        self,
        send: Callable[[], job_service_pb2.BatchSubmitResponse],
        request: job_service_pb2.BatchSubmitRequest,
    ) -> None:
        answer, code = answer_or_code(send, request)
        self.count(code)
        if answer is not None:
            assert len(answer.responses) == len(request.requests)
            for item, response in zip(request.requests, answer.responses, strict=True):
                self.note(item, response)

    def note(
        self, request: job_service_pb2.SubmitRequest, answer: job_service_pb2.SubmitResponse
    ) -> None:
        key, job_id = request.idempotency_key, answer.job.id
        seen = self.keys.get(key) if key else None
        if seen is None:
            assert not answer.reused, f"key {key!r} never used, yet reused job {job_id}"
            if key:
                self.keys[key] = (job_id, body(request))
            self.created.append(job_id)
            return
        assert answer.reused and job_id == seen[0], (
            f"key {key!r} of job {seen[0]} answered job {job_id} (reused={answer.reused})"
        )
        self.reused += 1


def tenant() -> tuple[tuple[str, str], ...]:
    return (("x-jobgate-tenant", f"fuzz-{uuid.uuid4().hex[:8]}"),)


def test_fuzzed_job_service_requests_never_fail_internally(deployment: Deployment) -> None:
    metadata = tenant()
    book = KeyBook()
    with grpc.insecure_channel(deployment.job_target) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)

        @FUZZ
        @given(submit=submits, batch=batches, job_id=ids, reason=st.text(max_size=1100))
        def check(submit: Any, batch: Any, job_id: str, reason: str) -> None:
            book.submit(lambda: stub.Submit(submit, metadata=metadata, timeout=10), submit)
            book.batch_submit(lambda: stub.BatchSubmit(batch, metadata=metadata, timeout=10), batch)
            get = job_service_pb2.GetRequest(job_id=job_id)
            assert_deliberate(lambda: stub.Get(get, metadata=metadata, timeout=10), get)
            cancel = job_service_pb2.CancelRequest(job_id=job_id, reason=reason)
            assert_deliberate(lambda: stub.Cancel(cancel, metadata=metadata, timeout=10), cancel)
            stream = job_service_pb2.StreamStatusRequest(job_id=job_id)
            assert_deliberate(
                lambda: list(stub.StreamStatus(stream, metadata=metadata, timeout=10)), stream
            )

        check()
        # Leave the shared deployment as found: nothing of the fuzzer's stays live.
        for job_id in book.created:
            stub.Cancel(job_service_pb2.CancelRequest(job_id=job_id), metadata=metadata, timeout=10)
    print(
        f"fuzzed job service: of {book.sent} submits {book.valid} valid, {book.answered} OK; "
        f"{len(book.created)} jobs created, {book.reused} reused"
    )
    # A good share of the fuzzed Submits and BatchSubmits pass validation and reach
    # the store, which creates jobs and answers reused keys.
    assert book.valid * 3 >= book.sent
    assert len(book.created) >= FUZZ.max_examples // 4
    assert book.reused > 0


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


@settings(parent=FUZZ, max_examples=100)
@given(submit=valid_submits(), batch=valid_batches())
def test_valid_requests_pass_the_gateways_validation(
    submit: job_service_pb2.SubmitRequest, batch: job_service_pb2.BatchSubmitRequest
) -> None:
    """The valid strategies keep to every rule the gateway checks (else fuzzing them
    would silently be INVALID_ARGUMENT again, and reach no store path)."""
    validate.submit(submit, DEFAULTS)
    validate.batch_submit(batch, DEFAULTS)
