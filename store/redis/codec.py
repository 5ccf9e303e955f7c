"""Script replies -> store model objects (RedisStore's side of the Lua contract)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from store.model import (
    ChildSummary,
    ClaimedJob,
    Job,
    JobEvent,
    JobKind,
    JobStatus,
    Priority,
)

Record = dict[str, bytes]


def ms_to_datetime(ms: int | bytes | str) -> datetime:
    return datetime.fromtimestamp(int(ms) / 1000, tz=UTC)


def to_ms(delta: timedelta) -> int:
    return round(delta.total_seconds() * 1000)


def record(flat: Sequence[bytes]) -> Record:
    """A flat HGETALL reply as a dict with str field names."""
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def _text(rec: Record, name: str) -> str:
    return rec.get(name, b"").decode()


def _int(rec: Record, name: str) -> int:
    value = rec.get(name, b"")
    return int(value) if value else 0


def _time(rec: Record, name: str) -> datetime | None:
    value = rec.get(name, b"")
    return ms_to_datetime(value) if value else None


def job_from_record(
    rec: Record,
    position: int = -1,
    result: bytes = b"",
    children: Sequence[bytes] = (),
) -> Job:
    create_time = ms_to_datetime(rec["create_time"])
    return Job(
        id=_text(rec, "id"),
        tenant=_text(rec, "tenant"),
        kind=JobKind(_text(rec, "kind")),
        status=JobStatus(_text(rec, "status")),
        priority=Priority(_int(rec, "priority")),
        model=_text(rec, "model"),
        create_time=create_time,
        update_time=_time(rec, "update_time") or create_time,
        content_type=_text(rec, "content_type"),
        labels=json.loads(rec.get("labels", b"{}") or b"{}"),
        idempotency_key=_text(rec, "idempotency_key"),
        attempts=_int(rec, "attempts"),
        max_attempts=_int(rec, "max_attempts"),
        start_time=_time(rec, "start_time"),
        end_time=_time(rec, "end_time"),
        queue_position=position if position >= 0 else None,
        progress=float(rec.get("progress", b"0") or b"0"),
        stage=_text(rec, "stage"),
        result=result,
        result_content_type=_text(rec, "result_content_type"),
        error_code=_text(rec, "error_code"),
        error_message=_text(rec, "error_message"),
        parent_id=_text(rec, "parent_id"),
        child_index=_int(rec, "child_index"),
        max_parallel=_int(rec, "max_parallel"),
        children=_children(children),
        worker_id=_text(rec, "worker_id"),
        cancel_requested=_text(rec, "cancel_requested") == "1",
        queue_timeout=timedelta(milliseconds=_int(rec, "queue_timeout")),
        run_timeout=timedelta(milliseconds=_int(rec, "run_timeout")),
    )


def _children(flat: Sequence[bytes]) -> tuple[ChildSummary, ...]:
    summaries = [
        ChildSummary(
            id=flat[i].decode(),
            child_index=int(flat[i + 1]),
            status=JobStatus(flat[i + 2].decode()),
            error_code=flat[i + 3].decode(),
        )
        for i in range(0, len(flat), 4)
    ]
    return tuple(sorted(summaries, key=lambda child: child.child_index))


def job_from_snapshot(reply: Sequence[Any]) -> Job:
    """includes/snapshot.lua's {record, position, result, children}."""
    flat, position, result, children = reply
    return job_from_record(record(flat), int(position), bytes(result), children)


def queue_score(snapshot: Sequence[Any]) -> str:
    """A snapshot's ready-queue score (its record's "seq"; "0" before it was queued)."""
    flat = snapshot[0]
    for i in range(0, len(flat), 2):
        if flat[i] == b"seq":
            return str(flat[i + 1].decode())
    return "0"


def claimed_from_reply(reply: Sequence[Any]) -> ClaimedJob:
    """claim.lua's {record, payload, lease_id, lease_deadline_ms}."""
    flat, payload, lease_id, deadline = reply
    return ClaimedJob(
        job=job_from_record(record(flat)),
        payload=bytes(payload),
        lease_id=lease_id.decode(),
        lease_expire_time=ms_to_datetime(deadline),
    )


def event_from_fields(stream_id: str, fields: Record) -> JobEvent:
    from_status = _text(fields, "from")
    return JobEvent(
        id=stream_id,
        job_id=_text(fields, "job_id"),
        parent_job_id=_text(fields, "parent_job_id"),
        tenant=_text(fields, "tenant"),
        model=_text(fields, "model"),
        priority=Priority(_int(fields, "priority")),
        from_status=JobStatus(from_status) if from_status else None,
        to_status=JobStatus(_text(fields, "to")),
        attempts=_int(fields, "attempts"),
        worker_id=_text(fields, "worker_id"),
        error_code=_text(fields, "error_code"),
        time=ms_to_datetime(fields["time"]),
    )


def event_from_emitted(entry: Sequence[bytes]) -> JobEvent:
    """common.lua's EMITTED entry {stream id, field, value, ...}."""
    return event_from_fields(entry[0].decode(), record(entry[1:]))
