"""Validation of WorkerService requests; each violation names its field."""

from __future__ import annotations

from jobgate.v1 import job_pb2
from jobgate.v1 import worker_service_pb2 as pb
from jobgate.v1.limits import (
    ERROR_CODE_PATTERN,
    MAX_CONTENT_TYPE_BYTES,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_JOBS_PER_CLAIM,
    MAX_LEASE_ID_BYTES,
    MAX_MODELS,
    MAX_STAGE_BYTES,
    MAX_WAIT_SECONDS,
    MAX_WORKER_ID_BYTES,
)
from serving.validation import Violations

_RESULT_STATUSES = (job_pb2.JOB_STATUS_COMPLETED, job_pb2.JOB_STATUS_FAILED)


def claim_next(request: pb.ClaimNextRequest) -> None:
    v = Violations()
    v.printable_ascii("worker_id", request.worker_id, MAX_WORKER_ID_BYTES, required=True)
    if not 1 <= len(request.models) <= MAX_MODELS:
        v.add("models", f"must have 1 to {MAX_MODELS} entries (got {len(request.models)})")
    for index, model in enumerate(request.models[:MAX_MODELS]):
        v.model(f"models[{index}]", model)
    v.duration("wait", request.wait, MAX_WAIT_SECONDS)
    v.int_range("max_jobs", request.max_jobs, 0, MAX_JOBS_PER_CLAIM)
    v.raise_if_any()


def _lease(v: Violations, job_id: str, lease_id: str) -> None:
    v.job_id("job_id", job_id)
    v.printable_ascii("lease_id", lease_id, MAX_LEASE_ID_BYTES, required=True)


def heartbeat(request: pb.HeartbeatRequest) -> None:
    v = Violations()
    _lease(v, request.job_id, request.lease_id)
    v.fraction("progress", request.progress)
    v.max_bytes("stage", request.stage, MAX_STAGE_BYTES)
    v.raise_if_any()


def set_result(request: pb.SetResultRequest, max_result_bytes: int) -> None:
    v = Violations()
    _lease(v, request.job_id, request.lease_id)
    v.enum("status", request.status, _RESULT_STATUSES, "JOB_STATUS_COMPLETED or JOB_STATUS_FAILED")
    v.max_bytes("result", request.result, max_result_bytes)
    v.max_bytes("result_content_type", request.result_content_type, MAX_CONTENT_TYPE_BYTES)
    if request.error_code and not ERROR_CODE_PATTERN.fullmatch(request.error_code):
        v.add("error_code", "must match [A-Z][A-Z0-9_]{0,63}")
    v.max_bytes("error_message", request.error_message, MAX_ERROR_MESSAGE_BYTES)
    v.raise_if_any()
