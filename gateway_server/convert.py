"""JobService messages <-> store model (the Job itself: serving.convert)."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from jobgate.v1 import job_pb2, job_service_pb2
from serving.convert import PRIORITY_FROM_PROTO, duration_or_none
from store.model import GroupSpec, JobSpec, SubmitRequest


def submit_request(
    tenant: str, request: job_service_pb2.SubmitRequest, weight: int = 1
) -> SubmitRequest:
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
        weight=weight,
    )


def _from_proto(kind: object) -> Callable[[Any], object]:
    if kind == timedelta | None:
        return duration_or_none
    if kind == Mapping[str, str]:
        return dict
    return lambda value: value


#: Every store JobSpec field, read from the proto field of the same name: a
#: new one needs no line here.
_SPEC_FIELDS = [(name, _from_proto(kind)) for name, kind in typing.get_type_hints(JobSpec).items()]


def job_spec(spec: job_pb2.JobSpec) -> JobSpec:
    return JobSpec(**{name: convert(getattr(spec, name)) for name, convert in _SPEC_FIELDS})  # type: ignore[arg-type]


def specs_of(request: SubmitRequest) -> tuple[JobSpec, ...]:
    """The units of work a request creates (a group's children, or the job)."""
    return request.work.children if isinstance(request.work, GroupSpec) else (request.work,)
