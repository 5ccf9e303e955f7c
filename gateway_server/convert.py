"""JobService messages <-> store model (the Job itself: serving.convert)."""

from __future__ import annotations

from jobgate.v1 import job_pb2, job_service_pb2
from serving.convert import PRIORITY_FROM_PROTO, duration_or_none
from store.model import GroupSpec, JobSpec, SubmitRequest


def submit_request(tenant: str, request: job_service_pb2.SubmitRequest) -> SubmitRequest:
    """The store's SubmitRequest for a validated proto request."""
    work: JobSpec | GroupSpec
    if request.WhichOneof("work") == "group":
        work = GroupSpec(
            children=tuple(job_spec(child) for child in request.group.children),
            max_parallel=request.group.max_parallel,
        )
    else:
        work = job_spec(request.job)
    return SubmitRequest(
        tenant=tenant,
        work=work,
        priority=PRIORITY_FROM_PROTO[request.priority],
        idempotency_key=request.idempotency_key,
    )


def job_spec(spec: job_pb2.JobSpec) -> JobSpec:
    return JobSpec(
        model=spec.model,
        payload=spec.payload,
        content_type=spec.content_type,
        labels=dict(spec.labels),
        max_attempts=spec.max_attempts,
        queue_timeout=duration_or_none(spec.queue_timeout),
        run_timeout=duration_or_none(spec.run_timeout),
        pool=spec.pool,  # as requested: serving.placement binds it
    )


def specs_of(request: SubmitRequest) -> tuple[JobSpec, ...]:
    """The units of work a request creates (a group's children, or the job)."""
    return request.work.children if isinstance(request.work, GroupSpec) else (request.work,)
