"""WorkerService messages <-> store model (the Job itself: serving.convert)."""

from __future__ import annotations

from jobgate.v1 import worker_service_pb2 as pb
from jobgate.v1.errors import HANDLER_ERROR
from serving.convert import STATUS_FROM_PROTO, job_to_proto, timestamp
from store.model import ClaimedJob, HeartbeatResult, JobStatus, ResultReport


def claimed_job(claimed: ClaimedJob) -> pb.ClaimedJob:
    return pb.ClaimedJob(
        job=job_to_proto(claimed.job),
        payload=claimed.payload,
        lease_id=claimed.lease_id,
        lease_expire_time=timestamp(claimed.lease_expire_time),
    )


def heartbeat_response(result: HeartbeatResult) -> pb.HeartbeatResponse:
    return pb.HeartbeatResponse(
        lease_expire_time=timestamp(result.lease_expire_time),
        cancel_requested=result.cancel_requested,
    )


def result_status(request: pb.SetResultRequest) -> JobStatus:
    return STATUS_FROM_PROTO[request.status]


def result_report(request: pb.SetResultRequest) -> ResultReport:
    return ResultReport(
        status=result_status(request),
        result=request.result,
        result_content_type=request.result_content_type,
        error_code=error_code(request),
        error_message=request.error_message,
        retryable=request.retryable,
    )


def error_code(request: pb.SetResultRequest) -> str:
    """The API's default: a FAILED result without a code is HANDLER_ERROR."""
    if not request.error_code and result_status(request) is JobStatus.FAILED:
        return HANDLER_ERROR
    return request.error_code
