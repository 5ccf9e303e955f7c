"""Human-readable rendering of jobs for the CLI: one-liners, details, a live progress line."""

from __future__ import annotations

from datetime import UTC
from typing import TextIO

from google.protobuf import timestamp_pb2

from jobgate.client import is_terminal, status_name
from jobgate.v1 import job_pb2

BAR_WIDTH = 24
#: Results of these types are printed by `jobgate get`; others are summarised.
_TEXT_TYPES = ("text/", "application/json", "application/x-ndjson", "application/xml")
MAX_SHOWN_RESULT = 4000


def priority_name(priority: int) -> str:
    if priority == job_pb2.PRIORITY_UNSPECIFIED:
        return "batch"
    return job_pb2.Priority.Name(priority).removeprefix("PRIORITY_").lower()  # type: ignore[arg-type]


def job_line(job: job_pb2.Job) -> str:
    """'01H... text-stats QUEUED (position 2)' in one line."""
    parts = [job.id, job.model or "group" if job.kind == job_pb2.JOB_KIND_GROUP else job.model]
    parts.append(status_name(job.status))
    text = " ".join(p for p in parts if p)
    if job.HasField("queue_position"):
        text += f" (queue position {job.queue_position})"
    return text


def progress_bar(progress: float, width: int = BAR_WIDTH) -> str:
    """'[######------]  50%' for 0.5."""
    value = min(1.0, max(0.0, progress))
    filled = round(value * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {value * 100:3.0f}%"


def status_text(job: job_pb2.Job) -> str:
    """What `watch` shows for one snapshot."""
    status = status_name(job.status)
    if job.status == job_pb2.JOB_STATUS_QUEUED:
        position = f" position {job.queue_position}" if job.HasField("queue_position") else ""
        return f"{status}{position}"
    if job.status in (job_pb2.JOB_STATUS_HELD, job_pb2.JOB_STATUS_UNSPECIFIED):
        return status
    text = f"{progress_bar(job.progress)} {status}"
    if job.stage:
        text += f" {job.stage}"
    if job.kind == job_pb2.JOB_KIND_GROUP and job.children:
        done = sum(1 for child in job.children if child.status in _TERMINAL)
        text += f" ({done}/{len(job.children)} children done)"
    return text


_TERMINAL = (
    job_pb2.JOB_STATUS_COMPLETED,
    job_pb2.JOB_STATUS_FAILED,
    job_pb2.JOB_STATUS_CANCELLED,
    job_pb2.JOB_STATUS_PARTIAL,
)


def final_text(job: job_pb2.Job) -> str:
    """The last line of `watch`: the outcome, with the error when there is one."""
    text = f"{job.id} {status_name(job.status)}"
    if job.error_code:
        text += f": {job.error_code}"
        if job.error_message:
            text += f": {job.error_message}"
    elif job.status == job_pb2.JOB_STATUS_COMPLETED and job.kind != job_pb2.JOB_KIND_GROUP:
        text += f" ({len(job.result)} bytes of {job.result_content_type or 'result'})"
    return text


class ProgressLine:
    """Prints snapshots: redraws one line on a terminal, one line per change otherwise."""

    def __init__(self, out: TextIO, *, live: bool) -> None:
        self._out = out
        self._live = live
        self._last = ""
        self._width = 0

    def update(self, job: job_pb2.Job) -> None:
        text = status_text(job)
        if text == self._last or is_terminal(job):
            return
        self._last = text
        if self._live:
            padding = " " * max(0, self._width - len(text))
            self._out.write(f"\r{text}{padding}")
            self._width = len(text)
        else:
            self._out.write(f"{text}\n")
        self._out.flush()

    def finish(self, job: job_pb2.Job) -> None:
        if self._live and self._width:
            self._out.write("\r" + " " * self._width + "\r")
        self._out.write(f"{final_text(job)}\n")
        self._out.flush()


def _time(stamp: timestamp_pb2.Timestamp) -> str:
    if not stamp.seconds and not stamp.nanos:
        return "-"
    return stamp.ToDatetime(tzinfo=UTC).isoformat(timespec="seconds")


def result_text(job: job_pb2.Job) -> str | None:
    """The result as text when its type is textual and it decodes, else None."""
    if not job.result:
        return None
    content_type = job.result_content_type.lower()
    if content_type and not content_type.startswith(_TEXT_TYPES):
        return None
    try:
        return job.result.decode()
    except UnicodeDecodeError:
        return None


def describe_job(job: job_pb2.Job) -> str:
    """A multi-line description for `jobgate get`."""
    kind = job_pb2.JobKind.Name(job.kind).removeprefix("JOB_KIND_").lower()
    rows = [
        ("job", f"{job.id} ({kind})"),
        ("status", status_text(job) if not is_terminal(job) else status_name(job.status)),
        ("model", job.model or "-"),
        ("priority", priority_name(job.priority)),
        ("tenant", job.tenant or "-"),
        ("attempts", f"{job.attempts}/{job.max_attempts}" if job.max_attempts else "-"),
        ("created", _time(job.create_time)),
        ("started", _time(job.start_time)),
        ("ended", _time(job.end_time)),
    ]
    if job.stage or job.progress:
        rows.append(("progress", f"{job.progress * 100:.0f}% {job.stage}".rstrip()))
    if job.worker_id:
        rows.append(("worker", job.worker_id))
    if job.labels:
        rows.append(("labels", " ".join(f"{k}={v}" for k, v in sorted(job.labels.items()))))
    if job.parent_id:
        rows.append(("parent", f"{job.parent_id} (child {job.child_index})"))
    if job.idempotency_key:
        rows.append(("key", job.idempotency_key))
    if job.error_code:
        rows.append(("error", f"{job.error_code}: {job.error_message}".rstrip(": ")))
    for child in job.children:
        status = status_name(child.status)
        error = f" {child.error_code}" if child.error_code else ""
        rows.append((f"child {child.child_index}", f"{child.id} {status}{error}"))
    if job.result or job.result_content_type:
        rows.append(("result", f"{len(job.result)} bytes, {job.result_content_type or '-'}"))
    text = "\n".join(f"{name:<9} {value}" for name, value in rows)
    shown = result_text(job)
    if shown is not None:
        if len(shown) > MAX_SHOWN_RESULT:
            shown = shown[:MAX_SHOWN_RESULT] + "\n... (cut; use --output FILE for all of it)"
        text += "\n\n" + shown.rstrip("\n")
    return text
