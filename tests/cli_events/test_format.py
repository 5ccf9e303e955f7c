"""How one audit event is printed: a human line and a JSON object (no store needed)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

from jobgate.cli._events import format_human, format_json
from store.model import JobEvent, JobStatus, Priority

CLAIM = JobEvent(
    id="1764410400000-0",
    job_id="01JD0000000000000000000001",
    parent_job_id="01JD0000000000000000000000",
    tenant="acme",
    model="text-stats",
    priority=Priority.INTERACTIVE,
    from_status=JobStatus.QUEUED,
    to_status=JobStatus.PROCESSING,
    attempts=2,
    worker_id="gpu-7",
    error_code="",
    time=datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC),
)
CREATED = JobEvent(
    id="1764410400000-1",
    job_id="01JD0000000000000000000002",
    parent_job_id="",
    tenant="default",
    model="text-stats",
    priority=Priority.BATCH,
    from_status=None,
    to_status=JobStatus.QUEUED,
    attempts=0,
    worker_id="",
    error_code="",
    time=datetime(2026, 11, 29, 10, 0, 1, tzinfo=UTC),
)


def test_human_line_names_every_field_in_order() -> None:
    assert format_human(CLAIM) == (
        "2026-11-29T10:00:00.123Z  01JD0000000000000000000001"
        "  parent=01JD0000000000000000000000  tenant=acme  model=text-stats"
        "  queued -> processing  attempts=2  worker=gpu-7  error=-"
    )


def test_human_line_marks_creation_and_empty_fields() -> None:
    line = format_human(CREATED)
    assert "  new -> queued  " in line
    assert "parent=-" in line
    assert "worker=-" in line


def test_json_line_is_one_object_with_every_field() -> None:
    line = format_json(CLAIM)
    assert "\n" not in line
    assert json.loads(line) == {
        "id": "1764410400000-0",
        "time": "2026-11-29T10:00:00.123Z",
        "job_id": "01JD0000000000000000000001",
        "parent_job_id": "01JD0000000000000000000000",
        "tenant": "acme",
        "model": "text-stats",
        "priority": "interactive",
        "from": "queued",
        "to": "processing",
        "attempts": 2,
        "worker_id": "gpu-7",
        "error_code": "",
        "actor": "",
    }


def test_an_admins_change_names_who_acted() -> None:
    retried = dataclasses.replace(CREATED, from_status=JobStatus.FAILED, actor="admin:ops")
    assert format_human(retried).endswith("  error=-  by=admin:ops")
    assert json.loads(format_json(retried))["actor"] == "admin:ops"


def test_json_from_is_null_for_the_creating_event() -> None:
    assert json.loads(format_json(CREATED))["from"] is None


def test_naive_times_are_read_as_utc() -> None:
    naive = dataclasses.replace(CREATED, time=datetime(2026, 11, 29, 10, 0, 1))
    assert format_human(naive).startswith("2026-11-29T10:00:01.000Z  ")
