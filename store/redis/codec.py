"""Script replies -> store model objects (RedisStore's side of the Lua contract).

A job's record is decoded by the field table (store/fields.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.fields import from_record, ms_to_datetime
from store.model import (
    ChildSummary,
    ClaimedJob,
    Job,
    JobEvent,
    JobStatus,
    Priority,
)

Record = dict[str, bytes]


def record(flat: Sequence[bytes]) -> Record:
    """A flat HGETALL reply as a dict with str field names."""
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def _text(rec: Record, name: str) -> str:
    return rec.get(name, b"").decode()


def _int(rec: Record, name: str) -> int:
    value = rec.get(name, b"")
    return int(value) if value else 0


def job_from_record(
    rec: Record,
    position: int = -1,
    result: bytes = b"",
    children: Sequence[bytes] = (),
) -> Job:
    return from_record(
        rec,
        queue_position=position if position >= 0 else None,
        result=result,
        children=_children(children),
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
        actor=_text(fields, "actor"),
    )


def event_from_emitted(entry: Sequence[bytes]) -> JobEvent:
    """common.lua's EMITTED entry {stream id, field, value, ...}."""
    return event_from_fields(entry[0].decode(), record(entry[1:]))
