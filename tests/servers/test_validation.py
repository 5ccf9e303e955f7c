"""Every request field is checked: INVALID_ARGUMENT with a BadRequest naming it."""

from __future__ import annotations

import base64
import urllib.parse
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from serving.settings import ServerSettings
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, fails, failure_of, seconds

GOOD_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
COMPLETED = job_pb2.JOB_STATUS_COMPLETED


def job(**fields: Any) -> job_service_pb2.SubmitRequest:
    spec = {"model": "m", **fields}
    return job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(**spec))


def group(children: int, **fields: Any) -> job_service_pb2.SubmitRequest:
    specs = [job_pb2.JobSpec(model="m") for _ in range(children)]
    return job_service_pb2.SubmitRequest(group=job_pb2.GroupSpec(children=specs, **fields))


def negative() -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=-1)


SUBMIT_CASES: list[tuple[str, job_service_pb2.SubmitRequest, str]] = [
    ("no work", job_service_pb2.SubmitRequest(), "work"),
    ("empty model", job(model=""), "job.model"),
    ("upper-case model", job(model="Llama"), "job.model"),
    ("model too long", job(model="m" * 65), "job.model"),
    ("payload over the limit", job(payload=b"x" * 1025), "job.payload"),
    ("content_type too long", job(content_type="t" * 256), "job.content_type"),
    ("too many labels", job(labels={f"k{i}": "v" for i in range(65)}), "job.labels"),
    ("empty label key", job(labels={"": "v"}), "job.labels['']"),
    ("label value too long", job(labels={"k": "v" * 256}), "job.labels['k']"),
    ("max_attempts negative", job(max_attempts=-1), "job.max_attempts"),
    ("max_attempts over 100", job(max_attempts=101), "job.max_attempts"),
    ("negative queue_timeout", job(queue_timeout=negative()), "job.queue_timeout"),
    ("negative run_timeout", job(run_timeout=negative()), "job.run_timeout"),
    (
        "unknown priority",
        job_service_pb2.SubmitRequest(priority=9, job=job_pb2.JobSpec(model="m")),  # type: ignore[arg-type]
        "priority",
    ),
    (
        "key too long",
        job_service_pb2.SubmitRequest(idempotency_key="k" * 129, job=job_pb2.JobSpec(model="m")),
        "idempotency_key",
    ),
    (
        "key not printable",
        job_service_pb2.SubmitRequest(idempotency_key="a\nb", job=job_pb2.JobSpec(model="m")),
        "idempotency_key",
    ),
    ("upper-case pool", job(pool="GPU"), "job.pool"),
    ("pool with a space", job(pool="gpu a"), "job.pool"),
    ("pool too long", job(pool="p" * 65), "job.pool"),
    ("empty group", group(0), "group.children"),
    ("group over the cap", group(4), "group.children"),
    ("negative max_parallel", group(2, max_parallel=-1), "group.max_parallel"),
]


@pytest.fixture
async def limited(make_harness: MakeHarness) -> Harness:
    return await make_harness(settings=ServerSettings(max_payload_bytes=1024, max_group_children=3))


@pytest.mark.parametrize(
    ("request_", "field"), [c[1:] for c in SUBMIT_CASES], ids=[c[0] for c in SUBMIT_CASES]
)
async def test_submit_field_is_validated(
    limited: Harness, request_: job_service_pb2.SubmitRequest, field: str
) -> None:
    failure = await fails(limited.job.Submit(request_, timeout=5))
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT
    assert field in failure.violations


async def test_group_child_violation_names_its_index(limited: Harness) -> None:
    children = [job_pb2.JobSpec(model="ok"), job_pb2.JobSpec(model="Bad!")]
    request = job_service_pb2.SubmitRequest(group=job_pb2.GroupSpec(children=children))
    failure = await fails(limited.job.Submit(request, timeout=5))
    assert failure.violations == ["group.children[1].model"]


async def test_a_group_childs_pool_names_its_index(limited: Harness) -> None:
    children = [job_pb2.JobSpec(model="m"), job_pb2.JobSpec(model="m", pool="Bad pool")]
    request = job_service_pb2.SubmitRequest(group=job_pb2.GroupSpec(children=children))
    failure = await fails(limited.job.Submit(request, timeout=5))
    assert failure.violations == ["group.children[1].pool"]


async def test_a_batch_items_pool_names_its_index(harness: Harness) -> None:
    items = [job(), job(pool="-leading-dash")]
    request = job_service_pb2.BatchSubmitRequest(requests=items)
    failure = await fails(harness.job.BatchSubmit(request, timeout=5))
    assert failure.violations == ["requests[1].job.pool"]


async def test_an_empty_pool_is_valid(harness: Harness) -> None:
    response = await harness.job.Submit(job(pool=""), timeout=5)
    assert response.job.id


async def test_every_violation_of_a_request_is_listed(limited: Harness) -> None:
    request = job(model="", max_attempts=500)
    failure = await fails(limited.job.Submit(request, timeout=5))
    assert failure.violations == ["job.model", "job.max_attempts"]


def trailer_bytes(error: grpc.aio.AioRpcError) -> int:
    """What the error's trailers weigh on the wire (values as sent, keys included)."""
    trailers: Any = error.trailing_metadata() or ()
    total = 0
    for key, value in trailers:
        sent = base64.b64encode(value) if isinstance(value, bytes) else value.encode()
        total += len(key) + len(sent)
    return total + len(urllib.parse.quote(error.details() or "", safe=" "))


async def submit_error(harness: Harness, request: job_service_pb2.SubmitRequest) -> Any:
    try:
        await harness.job.Submit(request, timeout=5)
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("the call succeeded")


async def test_a_huge_label_key_is_invalid_argument_not_resource_exhausted(
    harness: Harness,
) -> None:
    error = await submit_error(harness, job(labels={"k" * 100_000: "v"}))
    failure = failure_of(error)
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT, failure
    [field] = failure.violations
    assert field.startswith("job.labels['kkk") and len(field) < 200


async def test_many_huge_violations_still_fit_the_metadata_limit(limited: Harness) -> None:
    # 3 children x 30 labels, each key 2 KB and value 2 KB: 180 violations of quoted input.
    labels = {f"{i}" + "é" * 1000: "v" * 2000 for i in range(30)}
    children = [job_pb2.JobSpec(model="m", labels=labels) for _ in range(3)]
    request = job_service_pb2.SubmitRequest(group=job_pb2.GroupSpec(children=children))
    error = await submit_error(limited, request)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert trailer_bytes(error) < 8 * 1024


@pytest.mark.parametrize(
    "settings",
    [
        ServerSettings(max_group_children=10, max_live_per_tenant=3),
        ServerSettings(max_group_children=10, max_live_total=3),
    ],
    ids=["over the tenant cap", "over the total cap"],
)
async def test_a_group_that_can_never_fit_is_invalid_argument(
    make_harness: MakeHarness, settings: ServerSettings
) -> None:
    harness = await make_harness(settings=settings)
    failure = await fails(harness.job.Submit(group(4), timeout=5))
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT, failure
    assert (failure.violations, failure.retry_delay) == (["group.children"], None)


async def test_a_group_as_large_as_the_live_caps_is_accepted(make_harness: MakeHarness) -> None:
    settings = ServerSettings(max_group_children=10, max_live_per_tenant=3, max_live_total=3)
    harness = await make_harness(settings=settings)
    response = await harness.job.Submit(group(3), timeout=5)
    assert len(response.job.children) == 3


@pytest.mark.parametrize("job_id", ["", "not-a-ulid", "81ARZ3NDEKTSV4RRFFQ69G5FAV"])
async def test_job_id_must_be_a_ulid(harness: Harness, job_id: str) -> None:
    for call in (
        harness.job.Get(job_service_pb2.GetRequest(job_id=job_id), timeout=5),
        harness.job.Cancel(job_service_pb2.CancelRequest(job_id=job_id), timeout=5),
    ):
        failure = await fails(call)
        assert (failure.code, failure.violations) == (grpc.StatusCode.INVALID_ARGUMENT, ["job_id"])


@pytest.mark.parametrize("job_id", ["", "not-a-ulid", "81ARZ3NDEKTSV4RRFFQ69G5FAV"])
async def test_retry_job_id_is_validated_like_gets(harness: Harness, job_id: str) -> None:
    call = harness.job.RetryJob(job_service_pb2.RetryJobRequest(job_id=job_id), timeout=5)
    failure = await fails(call)
    assert (failure.code, failure.violations) == (grpc.StatusCode.INVALID_ARGUMENT, ["job_id"])


LIST_CASES: list[tuple[str, job_service_pb2.ListJobsRequest, str]] = [
    ("negative page_size", job_service_pb2.ListJobsRequest(page_size=-1), "page_size"),
    ("filter over 4096 bytes", job_service_pb2.ListJobsRequest(filter="m" * 4097), "filter"),
    ("filter not understood", job_service_pb2.ListJobsRequest(filter="status ="), "filter"),
    ("page_token too long", job_service_pb2.ListJobsRequest(page_token="t" * 513), "page_token"),
    ("page_token not a token", job_service_pb2.ListJobsRequest(page_token="abc"), "page_token"),
]


@pytest.mark.parametrize(
    ("request_", "field"), [c[1:] for c in LIST_CASES], ids=[c[0] for c in LIST_CASES]
)
async def test_list_jobs_field_is_validated(
    harness: Harness, request_: job_service_pb2.ListJobsRequest, field: str
) -> None:
    failure = await fails(harness.job.ListJobs(request_, timeout=5))
    assert (failure.code, failure.violations) == (grpc.StatusCode.INVALID_ARGUMENT, [field])


async def test_stream_status_validates_job_id(harness: Harness) -> None:
    stream = harness.job.StreamStatus(job_service_pb2.StreamStatusRequest(job_id="x"), timeout=5)
    failure = await fails(stream.read())
    assert failure.violations == ["job_id"]


async def test_cancel_reason_is_limited(harness: Harness) -> None:
    request = job_service_pb2.CancelRequest(job_id=GOOD_ID, reason="r" * 1025)
    assert (await fails(harness.job.Cancel(request, timeout=5))).violations == ["reason"]


def claim(**fields: Any) -> worker_service_pb2.ClaimNextRequest:
    base: dict[str, Any] = {"worker_id": "w", "models": ["m"]}
    base.update(fields)
    return worker_service_pb2.ClaimNextRequest(**base)


CLAIM_CASES: list[tuple[str, worker_service_pb2.ClaimNextRequest, str]] = [
    ("no worker_id", claim(worker_id=""), "worker_id"),
    ("worker_id too long", claim(worker_id="w" * 129), "worker_id"),
    ("worker_id not ASCII", claim(worker_id="wörker"), "worker_id"),
    ("no models", claim(models=[]), "models"),
    ("too many models", claim(models=[f"m{i}" for i in range(33)]), "models"),
    ("bad model", claim(models=["ok", "NOT OK"]), "models[1]"),
    ("wait over 60 s", claim(wait=seconds(61)), "wait"),
    ("negative wait", claim(wait=duration_pb2.Duration(seconds=-1)), "wait"),
    ("max_jobs over 64", claim(max_jobs=65), "max_jobs"),
    ("negative max_jobs", claim(max_jobs=-1), "max_jobs"),
    ("bad pool", claim(pool="Pool!"), "pool"),
]


@pytest.mark.parametrize(
    ("request_", "field"), [c[1:] for c in CLAIM_CASES], ids=[c[0] for c in CLAIM_CASES]
)
async def test_claim_field_is_validated(
    harness: Harness, request_: worker_service_pb2.ClaimNextRequest, field: str
) -> None:
    failure = await fails(harness.worker.ClaimNext(request_, timeout=5))
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT
    assert field in failure.violations


def heartbeat(**fields: Any) -> worker_service_pb2.HeartbeatRequest:
    base: dict[str, Any] = {"job_id": GOOD_ID, "lease_id": "lease"}
    base.update(fields)
    return worker_service_pb2.HeartbeatRequest(**base)


def result(**fields: Any) -> worker_service_pb2.SetResultRequest:
    base: dict[str, Any] = {"job_id": GOOD_ID, "lease_id": "lease", "status": COMPLETED}
    base.update(fields)
    return worker_service_pb2.SetResultRequest(**base)


LEASE_CASES: list[tuple[str, str, Any, str]] = [
    ("heartbeat bad job_id", "Heartbeat", heartbeat(job_id="nope"), "job_id"),
    ("heartbeat no lease_id", "Heartbeat", heartbeat(lease_id=""), "lease_id"),
    ("progress over 1", "Heartbeat", heartbeat(progress=1.5), "progress"),
    ("progress NaN", "Heartbeat", heartbeat(progress=float("nan")), "progress"),
    ("stage too long", "Heartbeat", heartbeat(stage="s" * 129), "stage"),
    ("result no lease_id", "SetResult", result(lease_id=""), "lease_id"),
    ("status unspecified", "SetResult", result(status=job_pb2.JOB_STATUS_UNSPECIFIED), "status"),
    ("status queued", "SetResult", result(status=job_pb2.JOB_STATUS_QUEUED), "status"),
    ("result over the limit", "SetResult", result(result=b"x" * 1025), "result"),
    ("bad error_code", "SetResult", result(error_code="oops"), "error_code"),
    ("error_message too long", "SetResult", result(error_message="e" * 4097), "error_message"),
    (
        "result_content_type too long",
        "SetResult",
        result(result_content_type="t" * 256),
        "result_content_type",
    ),
]


@pytest.mark.parametrize(
    ("rpc", "request_", "field"), [c[1:] for c in LEASE_CASES], ids=[c[0] for c in LEASE_CASES]
)
async def test_lease_call_field_is_validated(
    limited: Harness, rpc: str, request_: Any, field: str
) -> None:
    failure = await fails(getattr(limited.worker, rpc)(request_, timeout=5))
    assert failure.code is grpc.StatusCode.INVALID_ARGUMENT
    assert field in failure.violations
