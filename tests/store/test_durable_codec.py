"""The journal's codec: a dataclass as a row, derived from its fields (store/journal/codec.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from store.journal import UNLOADED, RowCodec
from store.memory.durable import TABLES
from store.memory.record import Record
from store.model import JobEvent, JobKind, JobStatus, Priority


def a_full_record() -> Record:
    """A record with every field away from its default."""
    return Record(
        id="01JOB",
        tenant="acme",
        kind=JobKind.CHILD,
        status=JobStatus.PROCESSING,
        priority=Priority.INTERACTIVE,
        model="llm",
        create_time=1.5,
        update_time=2.5,
        fingerprint="f" * 64,
        payload=b"\x00payload\xff",
        content_type="application/json",
        labels={"team": "nlp", "quote": "it's"},
        idempotency_key="key#3",
        attempts=2,
        max_attempts=5,
        queue_timeout=10.0,
        run_timeout=20.0,
        start_time=3.0,
        end_time=None,
        progress=0.25,
        stage="tokenising",
        result=b"partial",
        result_content_type="text/plain",
        error_code="X",
        error_message="boom",
        parent_id="01PARENT",
        child_index=3,
        max_parallel=2,
        worker_id="w1",
        cancel_requested=True,
        seq=42,
        lease_id="lease",
        lease_deadline=9.0,
        run_deadline=19.0,
        outcome=(JobStatus.FAILED, True, "E", b"\x01result"),
        queue_deadline=7.0,
        ready_at=8.0,
        expire_at=99.0,
        children=["a", "b"],
        next_held=1,
        active_children=1,
        ended_children=1,
        completed_children=1,
    )


def test_every_record_field_survives_a_row_and_back() -> None:
    codec = TABLES.records
    record = a_full_record()

    rebuilt = codec.build(codec.row(record), b"")
    for name, value in zip(codec.blobs, codec.blob_values(record), strict=True):
        setattr(rebuilt, name, value)

    assert dataclasses.asdict(rebuilt) == dataclasses.asdict(record)
    assert rebuilt.kind is JobKind.CHILD and rebuilt.status is JobStatus.PROCESSING


def test_the_default_record_survives_too() -> None:
    codec = TABLES.records
    record = Record("id", "t", JobKind.SINGLE, JobStatus.QUEUED, Priority.BATCH, "m", 1.0, 1.0)

    rebuilt = codec.build(codec.row(record), b"")

    assert dataclasses.asdict(rebuilt) == dataclasses.asdict(record)


def test_rebuilt_containers_are_fresh_objects() -> None:
    codec = TABLES.records
    row = codec.row(Record("id", "t", JobKind.GROUP, JobStatus.QUEUED, Priority.BATCH, "m", 1, 1))

    first, second = codec.build(row), codec.build(row)
    first.children.append("child")

    assert second.children == []


def test_bytes_fields_are_blobs_not_columns() -> None:
    assert TABLES.records.blobs == ("payload", "result")
    assert "payload" not in TABLES.records.names


def test_blob_fields_take_the_fill_value() -> None:
    codec = TABLES.records
    row = codec.row(a_full_record())

    assert codec.build(row, UNLOADED).payload is UNLOADED


def test_an_event_survives_with_its_number_as_the_key() -> None:
    codec = TABLES.events
    event = JobEvent(
        id="17",
        job_id="j",
        parent_job_id="",
        tenant="t",
        model="m",
        priority=Priority.SYSTEM,
        from_status=None,
        to_status=JobStatus.QUEUED,
        attempts=0,
        worker_id="",
        error_code="",
        time=datetime(2026, 12, 3, 12, 0, 0, 250000, tzinfo=UTC),
    )

    row = codec.row(event)

    assert row[codec.names.index("id")] == 17
    assert codec.build(row) == event


def test_a_field_of_a_type_with_no_codec_fails_at_construction_naming_it() -> None:
    @dataclass
    class Odd:
        id: str
        when: complex = 0j

    with pytest.raises(TypeError, match=r"Odd\.when"):
        RowCodec(Odd, "id")


def test_each_field_default_is_its_columns_sql_default() -> None:
    @dataclass
    class Row:
        id: str
        count: int = 3
        name: str = "it's"
        tags: list[str] = field(default_factory=list)
        when: float | None = None

    defaults = {column.name: column.default_sql for column in RowCodec(Row, "id").columns}

    assert defaults == {"id": None, "count": "3", "name": "'it''s'", "tags": "'[]'", "when": "NULL"}
