"""Validation of WorkerService requests; each violation names its field."""

from __future__ import annotations

from collections.abc import Sequence

from jobgate.v1 import job_pb2
from jobgate.v1 import worker_service_pb2 as pb
from jobgate.v1.limits import (
    ERROR_CODE_PATTERN,
    MAX_CONTENT_TYPE_BYTES,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_JOBS_PER_CLAIM,
    MAX_LEASE_ID_BYTES,
    MAX_MODELS,
    MAX_REPORTS_PER_CALL,
    MAX_STAGE_BYTES,
    MAX_WAIT_SECONDS,
    MAX_WORKER_ID_BYTES,
)
from serving.violations import Violations

_RESULT_STATUSES = (job_pb2.JOB_STATUS_COMPLETED, job_pb2.JOB_STATUS_FAILED)


def claim_next(request: pb.ClaimNextRequest) -> None:
    v = Violations()
    v.printable_ascii("worker_id", request.worker_id, MAX_WORKER_ID_BYTES, required=True)
    _models(v, request.models)
    v.duration("wait", request.wait, MAX_WAIT_SECONDS)
    v.int_range("max_jobs", request.max_jobs, 0, MAX_JOBS_PER_CLAIM)
    v.pool("pool", request.pool)
    v.raise_if_any()


def _models(v: Violations, models: Sequence[str]) -> None:
    if not 1 <= len(models) <= MAX_MODELS:
        v.add("models", f"must have 1 to {MAX_MODELS} entries (got {len(models)})")
    for index, model in enumerate(models[:MAX_MODELS]):
        v.model(f"models[{index}]", model)


def _lease(v: Violations, prefix: str, job_id: str, lease_id: str) -> None:
    v.job_id(f"{prefix}job_id", job_id)
    v.printable_ascii(f"{prefix}lease_id", lease_id, MAX_LEASE_ID_BYTES, required=True)


def _heartbeat(v: Violations, request: pb.HeartbeatRequest, prefix: str = "") -> None:
    _lease(v, prefix, request.job_id, request.lease_id)
    v.fraction(f"{prefix}progress", request.progress)
    v.max_bytes(f"{prefix}stage", request.stage, MAX_STAGE_BYTES)


def _result(
    v: Violations, request: pb.SetResultRequest, max_result_bytes: int, prefix: str = ""
) -> None:
    _lease(v, prefix, request.job_id, request.lease_id)
    v.enum(
        f"{prefix}status",
        request.status,
        _RESULT_STATUSES,
        "JOB_STATUS_COMPLETED or JOB_STATUS_FAILED",
    )
    v.max_bytes(f"{prefix}result", request.result, max_result_bytes)
    v.max_bytes(f"{prefix}result_content_type", request.result_content_type, MAX_CONTENT_TYPE_BYTES)
    if request.error_code and not ERROR_CODE_PATTERN.fullmatch(request.error_code):
        v.add(f"{prefix}error_code", "must match [A-Z][A-Z0-9_]{0,63}")
    v.max_bytes(f"{prefix}error_message", request.error_message, MAX_ERROR_MESSAGE_BYTES)


def heartbeat(request: pb.HeartbeatRequest) -> None:
    v = Violations()
    _heartbeat(v, request)
    v.raise_if_any()


def set_result(request: pb.SetResultRequest, max_result_bytes: int) -> None:
    v = Violations()
    _result(v, request, max_result_bytes)
    v.raise_if_any()


def report_and_claim(request: pb.ReportAndClaimRequest, max_result_bytes: int) -> None:
    v = Violations()
    v.printable_ascii("worker_id", request.worker_id, MAX_WORKER_ID_BYTES, required=True)
    v.int_range("max_jobs", request.max_jobs, 0, MAX_JOBS_PER_CLAIM)
    if request.max_jobs > 0 or request.models:
        _models(v, request.models)
    v.duration("wait", request.wait, MAX_WAIT_SECONDS)
    v.pool("pool", request.pool)
    for name, items in (("results", request.results), ("heartbeats", request.heartbeats)):
        if len(items) > MAX_REPORTS_PER_CALL:
            v.add(name, f"at most {MAX_REPORTS_PER_CALL} entries (got {len(items)})")
    for index, result in enumerate(request.results[:MAX_REPORTS_PER_CALL]):
        _result(v, result, max_result_bytes, f"results[{index}].")
    for index, beat in enumerate(request.heartbeats[:MAX_REPORTS_PER_CALL]):
        _heartbeat(v, beat, f"heartbeats[{index}].")
    job_ids = [r.job_id for r in request.results]
    if len(set(job_ids)) != len(job_ids):
        v.add("results", "each job at most once per call")
    v.raise_if_any()
