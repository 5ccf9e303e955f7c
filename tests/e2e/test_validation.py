"""Bad input on every RPC: INVALID_ARGUMENT with a BadRequest violation naming the field.

No request may ever produce INTERNAL or UNKNOWN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from tests.e2e.api import Api, Failure, duration, failure_of
from tests.e2e.test_cancel import UNKNOWN_ID

ULID = UNKNOWN_ID
OK_MODEL = "ok-model"


def negative_duration() -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=-1)


def submit(**job: Any) -> job_service_pb2.SubmitRequest:
    return job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(**{"model": OK_MODEL, **job}))


def group(children: list[job_pb2.JobSpec], max_parallel: int = 0) -> job_service_pb2.SubmitRequest:
    return job_service_pb2.SubmitRequest(
        group=job_pb2.GroupSpec(children=children, max_parallel=max_parallel)
    )


def claim(**fields: Any) -> worker_service_pb2.ClaimNextRequest:
    base: dict[str, Any] = {"worker_id": "w-1", "models": [OK_MODEL]}
    return worker_service_pb2.ClaimNextRequest(**{**base, **fields})


def heartbeat(**fields: Any) -> worker_service_pb2.HeartbeatRequest:
    return worker_service_pb2.HeartbeatRequest(**{"job_id": ULID, "lease_id": "lease", **fields})


def set_result(**fields: Any) -> worker_service_pb2.SetResultRequest:
    base: dict[str, Any] = {
        "job_id": ULID,
        "lease_id": "lease",
        "status": job_pb2.JOB_STATUS_COMPLETED,
    }
    return worker_service_pb2.SetResultRequest(**{**base, **fields})


CASES: list[Any] = [
    pytest.param("Submit", job_service_pb2.SubmitRequest(), "work", id="submit-no-work"),
    pytest.param("Submit", submit(model=""), "model", id="submit-model-empty"),
    pytest.param("Submit", submit(model="Bad Model"), "model", id="submit-model-pattern"),
    pytest.param("Submit", submit(model="m" * 65), "model", id="submit-model-too-long"),
    pytest.param(
        "Submit",
        job_service_pb2.SubmitRequest(priority=99, job=job_pb2.JobSpec(model=OK_MODEL)),  # type: ignore[arg-type]
        "priority",
        id="submit-priority-unknown",
    ),
    pytest.param(
        "Submit",
        job_service_pb2.SubmitRequest(
            idempotency_key="k" * 129, job=job_pb2.JobSpec(model=OK_MODEL)
        ),
        "idempotency_key",
        id="submit-key-too-long",
    ),
    pytest.param(
        "Submit",
        job_service_pb2.SubmitRequest(
            idempotency_key="a\x01b", job=job_pb2.JobSpec(model=OK_MODEL)
        ),
        "idempotency_key",
        id="submit-key-not-printable",
    ),
    pytest.param(
        "Submit", submit(content_type="t" * 256), "content_type", id="submit-content-type"
    ),
    pytest.param(
        "Submit",
        submit(labels={f"k{i}": "v" for i in range(65)}),
        "labels",
        id="submit-too-many-labels",
    ),
    pytest.param("Submit", submit(labels={"": "v"}), "labels", id="submit-label-key-empty"),
    pytest.param("Submit", submit(labels={"k" * 64: "v"}), "labels", id="submit-label-key-long"),
    pytest.param("Submit", submit(labels={"k": "v" * 256}), "labels", id="submit-label-value-long"),
    pytest.param("Submit", submit(max_attempts=-1), "max_attempts", id="submit-attempts-negative"),
    pytest.param("Submit", submit(max_attempts=101), "max_attempts", id="submit-attempts-over"),
    pytest.param(
        "Submit",
        submit(queue_timeout=negative_duration()),
        "queue_timeout",
        id="submit-queue-timeout-negative",
    ),
    pytest.param(
        "Submit",
        submit(run_timeout=negative_duration()),
        "run_timeout",
        id="submit-run-timeout-negative",
    ),
    pytest.param("Submit", group([]), "children", id="group-no-children"),
    pytest.param(
        "Submit",
        group([job_pb2.JobSpec(model=OK_MODEL)], max_parallel=-1),
        "max_parallel",
        id="group-max-parallel-negative",
    ),
    pytest.param(
        "Submit",
        group([job_pb2.JobSpec(model=OK_MODEL), job_pb2.JobSpec(model="BAD")]),
        "model",
        id="group-child-model",
    ),
    pytest.param("Get", job_service_pb2.GetRequest(), "job_id", id="get-no-id"),
    pytest.param(
        "StreamStatus", job_service_pb2.StreamStatusRequest(), "job_id", id="stream-no-id"
    ),
    pytest.param("Cancel", job_service_pb2.CancelRequest(), "job_id", id="cancel-no-id"),
    pytest.param(
        "Cancel",
        job_service_pb2.CancelRequest(job_id=ULID, reason="r" * 1025),
        "reason",
        id="cancel-reason-too-long",
    ),
    pytest.param("ClaimNext", claim(worker_id=""), "worker_id", id="claim-no-worker"),
    pytest.param("ClaimNext", claim(worker_id="w" * 129), "worker_id", id="claim-worker-long"),
    pytest.param("ClaimNext", claim(models=[]), "models", id="claim-no-models"),
    pytest.param(
        "ClaimNext", claim(models=[f"m{i}" for i in range(33)]), "models", id="claim-many-models"
    ),
    pytest.param("ClaimNext", claim(models=["BAD"]), "models", id="claim-model-pattern"),
    pytest.param("ClaimNext", claim(wait=duration(61)), "wait", id="claim-wait-over-60s"),
    pytest.param("ClaimNext", claim(wait=negative_duration()), "wait", id="claim-wait-negative"),
    pytest.param("ClaimNext", claim(max_jobs=65), "max_jobs", id="claim-max-jobs-over"),
    pytest.param("ClaimNext", claim(max_jobs=-1), "max_jobs", id="claim-max-jobs-negative"),
    pytest.param("Heartbeat", heartbeat(job_id=""), "job_id", id="heartbeat-no-job"),
    pytest.param("Heartbeat", heartbeat(lease_id=""), "lease_id", id="heartbeat-no-lease"),
    pytest.param("Heartbeat", heartbeat(progress=1.5), "progress", id="heartbeat-progress-over"),
    pytest.param("Heartbeat", heartbeat(progress=-0.1), "progress", id="heartbeat-progress-neg"),
    pytest.param(
        "Heartbeat", heartbeat(progress=float("nan")), "progress", id="heartbeat-progress-nan"
    ),
    pytest.param("Heartbeat", heartbeat(stage="s" * 129), "stage", id="heartbeat-stage-long"),
    pytest.param("SetResult", set_result(job_id=""), "job_id", id="result-no-job"),
    pytest.param("SetResult", set_result(lease_id=""), "lease_id", id="result-no-lease"),
    pytest.param(
        "SetResult",
        set_result(status=job_pb2.JOB_STATUS_UNSPECIFIED),
        "status",
        id="result-status-unspecified",
    ),
    pytest.param(
        "SetResult",
        set_result(status=job_pb2.JOB_STATUS_QUEUED),
        "status",
        id="result-status-queued",
    ),
    pytest.param(
        "SetResult",
        set_result(status=job_pb2.JOB_STATUS_FAILED, error_code="not a code"),
        "error_code",
        id="result-error-code-pattern",
    ),
    pytest.param(
        "SetResult",
        set_result(status=job_pb2.JOB_STATUS_FAILED, error_message="e" * 4097),
        "error_message",
        id="result-error-message-long",
    ),
    pytest.param(
        "SetResult",
        set_result(result_content_type="t" * 256),
        "result_content_type",
        id="result-content-type-long",
    ),
]


def rpc(api: Api, method: str) -> Callable[..., Any]:
    stub: Any = api.workers if method in ("ClaimNext", "Heartbeat", "SetResult") else api.jobs
    function: Callable[..., Any] = getattr(stub, method)
    return function


async def call_failure(api: Api, method: str, request: Any) -> Failure:
    if method == "StreamStatus":
        stream = rpc(api, method)(request, metadata=api.client_metadata, timeout=10)
        return await failure_of(stream.read())
    metadata = (
        api.worker_metadata
        if method in ("ClaimNext", "Heartbeat", "SetResult")
        else (api.client_metadata)
    )
    return await failure_of(rpc(api, method)(request, metadata=metadata, timeout=10))


@pytest.mark.parametrize(("method", "request_message", "field"), CASES)
async def test_bad_input_is_invalid_argument_naming_the_field(
    api: Api, method: str, request_message: Any, field: str
) -> None:
    failure = await call_failure(api, method, request_message)

    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert failure.names_field(field), f"no violation names {field!r}: {failure}"


ODD_IDS = ["not-a-ulid", "x" * 5000, "ünïcødé", " ", "01ARZ3NDEKTSV4RRFFQ69G5FA!", "../../etc"]


@pytest.mark.parametrize("job_id", ODD_IDS)
async def test_odd_job_ids_never_cause_internal_errors(api: Api, job_id: str) -> None:
    calls = [
        ("Get", job_service_pb2.GetRequest(job_id=job_id)),
        ("Cancel", job_service_pb2.CancelRequest(job_id=job_id)),
        ("StreamStatus", job_service_pb2.StreamStatusRequest(job_id=job_id)),
        ("Heartbeat", heartbeat(job_id=job_id, lease_id=job_id)),
        ("SetResult", set_result(job_id=job_id, lease_id=job_id)),
    ]
    for method, request in calls:
        failure = await call_failure(api, method, request)
        assert failure.code in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.FAILED_PRECONDITION,
        ), f"{method}({job_id[:20]!r}): {failure}"


async def test_unknown_job_with_a_well_formed_id_is_not_found(api: Api) -> None:
    failure = await failure_of(api.get(ULID))

    assert failure.code == grpc.StatusCode.NOT_FOUND, failure
    assert failure.reason == "JOB_NOT_FOUND"


HUGE = 100_000


@pytest.mark.parametrize(
    "request_message",
    [
        submit(labels={"k" * HUGE: "v"}),
        submit(labels={f"{i}" + "k" * HUGE: "v" for i in range(20)}),
        submit(model="M" * HUGE, content_type="t" * HUGE),
    ],
    ids=["one huge label key", "twenty huge label keys", "huge model and content type"],
)
async def test_huge_bad_input_is_invalid_argument_quoting_at_most_128_bytes(
    api: Api, request_message: job_service_pb2.SubmitRequest
) -> None:
    failure = await failure_of(api.submit_request(request_message))

    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT, failure
    assert failure.violations
    assert all(len(path) < 200 for path, _ in failure.violations), failure
    assert len(failure.message.encode()) <= 512
