"""Store model <-> proto pieces that both services send: Job, enums, times.

store.model mirrors the proto enums by name (JobStatus.QUEUED is
JOB_STATUS_QUEUED, Priority.BATCH is PRIORITY_BATCH), and the maps below are
built from those names so the two cannot drift apart silently.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from jobgate.v1 import job_pb2
from store import fields
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


def _proto_value(name: str, kind: fields.Kind) -> Callable[[Any], object]:
    """A store Job value -> what job_pb2.Job takes for the field (None: leave it unset)."""
    by_kind: dict[fields.Kind, Callable[[Any], object]] = {
        fields.Kind.TIME: timestamp,
        fields.Kind.OPTIONAL_TIME: lambda value: None if value is None else timestamp(value),
        fields.Kind.LABELS: dict,
        fields.Kind.STATUS: STATUS_TO_PROTO.__getitem__,
        fields.Kind.KIND: KIND_TO_PROTO.__getitem__,
        fields.Kind.PRIORITY: PRIORITY_TO_PROTO.__getitem__,
    }
    if name == "children":
        return lambda children: [child_to_proto(child) for child in children]
    return by_kind.get(kind, lambda value: value)


#: Every field of the store's Job that the proto Job has, with its converter:
#: a new field needs no line here (store/fields.py).
_PROTO_FIELDS = [
    (f.name, _proto_value(f.name, f.kind))
    for f in fields.JOB_FIELDS
    if f.name in job_pb2.Job.DESCRIPTOR.fields_by_name
]


_OPTIONAL = frozenset(
    name for name, field in job_pb2.Job.DESCRIPTOR.fields_by_name.items() if field.has_presence
) - {f.name for f in fields.JOB_FIELDS if f.kind in (fields.Kind.TIME, fields.Kind.OPTIONAL_TIME)}


def job_to_proto(job: Job) -> job_pb2.Job:
    values: dict[str, Any] = {}
    for name, convert in _PROTO_FIELDS:
        value = getattr(job, name)
        # proto3 leaves defaults unset anyway; an optional field's 0 is a value
        if value or (value is not None and name in _OPTIONAL):
            values[name] = convert(value)
    return job_pb2.Job(**values)


def child_to_proto(child: ChildSummary) -> job_pb2.ChildSummary:
    return job_pb2.ChildSummary(
        id=child.id,
        child_index=child.child_index,
        status=STATUS_TO_PROTO[child.status],
        error_code=child.error_code,
    )
