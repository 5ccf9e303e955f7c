"""What the pages show of a job, a queue or a worker: plain values, never HTML.

Templates escape everything they print (Jinja2 autoescape), and the live
page's script writes these values with `textContent`, so a label holding
`<script>` is text wherever it appears. Nothing here builds markup.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import timestamp_pb2

from jobgate.client import is_terminal, status_name
from jobgate.v1 import job_pb2

#: How much of a textual result the job page shows.
RESULT_PREVIEW_BYTES = 64 * 1024
STATUSES = ("HELD", "QUEUED", "PROCESSING", "COMPLETED", "FAILED", "CANCELLED", "PARTIAL")
RETRYABLE = frozenset({"FAILED", "CANCELLED", "PARTIAL"})
_TEXT_TYPES = ("text/", "application/json", "application/x-ndjson", "application/xml")


def enum_name(enum: Any, value: int, prefix: str) -> str:
    try:
        return str(enum.Name(value)).removeprefix(prefix)
    except ValueError:
        return str(value)


def status_of(job: job_pb2.Job | job_pb2.ChildSummary) -> str:
    return enum_name(job_pb2.JobStatus, job.status, "JOB_STATUS_")


def kind_name(job: job_pb2.Job) -> str:
    return enum_name(job_pb2.JobKind, job.kind, "JOB_KIND_")


def attempts(job: job_pb2.Job, between: str = "/") -> str:
    """Attempts used of those allowed; "" for a group, which has none of its own (0 of 0)."""
    if job.kind == job_pb2.JOB_KIND_GROUP:
        return ""
    return f"{job.attempts}{between}{job.max_attempts}"


def priority_name(priority: int) -> str:
    return enum_name(job_pb2.Priority, priority, "PRIORITY_")


def when(stamp: timestamp_pb2.Timestamp, present: bool = True) -> str:
    """UTC to the second ("" for an unset time)."""
    if not present or (stamp.seconds == 0 and stamp.nanos == 0):
        return ""
    moment = datetime.fromtimestamp(stamp.seconds, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def age(stamp: timestamp_pb2.Timestamp, now: float | None = None) -> str:
    """How long ago, compactly ("" for an unset time): 45s, 3m 12s, 2h 5m, 3d 4h."""
    if stamp.seconds == 0 and stamp.nanos == 0:
        return ""
    seconds = max(0, int((time.time() if now is None else now) - stamp.seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def percent(progress: float) -> str:
    return f"{max(0.0, min(1.0, progress)) * 100:.0f}%"


def can_cancel(job: job_pb2.Job) -> bool:
    return not is_terminal(job)


def can_retry(job: job_pb2.Job) -> bool:
    return status_name(job.status) in RETRYABLE and job.kind != job_pb2.JOB_KIND_CHILD


def result_text(job: job_pb2.Job) -> str:
    """The result as text when it is textual UTF-8, else a size line."""
    if not job.result:
        return ""
    textual = job.result_content_type.startswith(_TEXT_TYPES) or not job.result_content_type
    if textual:
        try:
            text = job.result[:RESULT_PREVIEW_BYTES].decode()
        except UnicodeDecodeError:
            pass
        else:
            cut = len(job.result) > RESULT_PREVIEW_BYTES
            return text + (f"\n… ({len(job.result)} bytes in all)" if cut else "")
    return f"{len(job.result)} bytes of {job.result_content_type or 'binary data'}"


@dataclass(frozen=True)
class Field:
    label: str
    value: str
    #: The name the live script updates it by ("" when it never changes).
    live: str = ""


def job_fields(job: job_pb2.Job) -> list[Field]:
    """Every field of a job, in reading order (children and result are shown apart)."""
    position = str(job.queue_position) if job.HasField("queue_position") else ""
    return [
        Field("Id", job.id),
        Field("Status", status_name(job.status), "status"),
        Field("Tenant", job.tenant),
        Field("Kind", kind_name(job).lower()),
        Field("Priority", priority_name(job.priority).lower()),
        Field("Model", job.model),
        Field("Pool", job.pool or "any"),
        Field("Queue position", position, "queue_position"),
        Field("Progress", percent(job.progress), "progress_text"),
        Field("Stage", job.stage, "stage"),
        Field("Attempts", attempts(job, " of "), "attempts"),
        Field("Worker", job.worker_id, "worker_id"),
        Field("Cancel requested", "yes" if job.cancel_requested else "no", "cancel_requested"),
        Field("Created", when(job.create_time)),
        Field("Updated", when(job.update_time), "update_time"),
        Field("Started", when(job.start_time), "start_time"),
        Field("Ended", when(job.end_time), "end_time"),
        Field("Error code", job.error_code, "error_code"),
        Field("Error message", job.error_message, "error_message"),
        Field("Content type", job.content_type),
        Field("Result type", job.result_content_type, "result_content_type"),
        Field("Idempotency key", job.idempotency_key),
        Field("Parent", job.parent_id),
        Field("Child index", str(job.child_index) if job.parent_id else ""),
        Field("Max parallel", str(job.max_parallel) if job.kind == job_pb2.JOB_KIND_GROUP else ""),
    ]


def snapshot(job: job_pb2.Job) -> dict[str, Any]:
    """The live fields of one StreamStatus snapshot, as the job page's script reads them."""
    values = {field.live: field.value for field in job_fields(job) if field.live}
    return {
        **values,
        "progress": max(0.0, min(1.0, job.progress)),
        "terminal": is_terminal(job),
        "can_cancel": can_cancel(job),
        "can_retry": can_retry(job),
        "result": result_text(job),
        "children": [
            {"id": c.id, "status": status_name(c.status), "error_code": c.error_code}
            for c in job.children
        ],
    }


def labels(job: job_pb2.Job) -> list[tuple[str, str]]:
    return sorted(job.labels.items())


def models_of(jobs: Sequence[job_pb2.Job]) -> list[str]:
    return sorted({job.model for job in jobs if job.model})
