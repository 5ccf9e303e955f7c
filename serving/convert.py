"""Store model <-> proto pieces that both services send: Job, enums, times.

store.model mirrors the proto enums by name (JobStatus.QUEUED is
JOB_STATUS_QUEUED, Priority.BATCH is PRIORITY_BATCH), and the maps below are
built from those names so the two cannot drift apart silently.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf import duration_pb2, timestamp_pb2

from jobgate.v1 import job_pb2
from store.model import ChildSummary, Job, JobKind, JobStatus, Priority

STATUS_TO_PROTO: dict[JobStatus, job_pb2.JobStatus.ValueType] = {
    status: job_pb2.JobStatus.Value(f"JOB_STATUS_{status.name}") for status in JobStatus
}
STATUS_FROM_PROTO = {value: status for status, value in STATUS_TO_PROTO.items()}
KIND_TO_PROTO: dict[JobKind, job_pb2.JobKind.ValueType] = {
    kind: job_pb2.JobKind.Value(f"JOB_KIND_{kind.name}") for kind in JobKind
}
PRIORITY_TO_PROTO: dict[Priority, job_pb2.Priority.ValueType] = {
    priority: job_pb2.Priority.Value(f"PRIORITY_{priority.name}") for priority in Priority
}
PRIORITY_FROM_PROTO: dict[int, Priority] = {
    value: priority for priority, value in PRIORITY_TO_PROTO.items()
}
PRIORITY_FROM_PROTO[job_pb2.PRIORITY_UNSPECIFIED] = Priority.BATCH


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    return stamp


def duration_or_none(value: duration_pb2.Duration) -> timedelta | None:
    """A request duration: zero (or unset) means "the server default" (None)."""
    delta = value.ToTimedelta()
    return delta if delta > timedelta(0) else None


def job_to_proto(job: Job) -> job_pb2.Job:
    message = job_pb2.Job(
        id=job.id,
        tenant=job.tenant,
        kind=KIND_TO_PROTO[job.kind],
        status=STATUS_TO_PROTO[job.status],
        priority=PRIORITY_TO_PROTO[job.priority],
        model=job.model,
        content_type=job.content_type,
        labels=dict(job.labels),
        idempotency_key=job.idempotency_key,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        create_time=timestamp(job.create_time),
        update_time=timestamp(job.update_time),
        progress=job.progress,
        stage=job.stage,
        result=job.result,
        result_content_type=job.result_content_type,
        error_code=job.error_code,
        error_message=job.error_message,
        parent_id=job.parent_id,
        child_index=job.child_index,
        max_parallel=job.max_parallel,
        children=[child_to_proto(child) for child in job.children],
        worker_id=job.worker_id,
        cancel_requested=job.cancel_requested,
        pool=job.pool,
    )
    if job.start_time is not None:
        message.start_time.CopyFrom(timestamp(job.start_time))
    if job.end_time is not None:
        message.end_time.CopyFrom(timestamp(job.end_time))
    if job.queue_position is not None:
        message.queue_position = job.queue_position
    return message


def child_to_proto(child: ChildSummary) -> job_pb2.ChildSummary:
    return job_pb2.ChildSummary(
        id=child.id,
        child_index=child.child_index,
        status=STATUS_TO_PROTO[child.status],
        error_code=child.error_code,
    )
