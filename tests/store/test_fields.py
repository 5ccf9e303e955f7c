"""The field table (store/fields.py): every copy of a job is driven by it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobgate.v1 import job_pb2
from store import fields
from store.model import GroupSpec, Job, JobKind, JobSpec, JobStatus, Priority, SubmitRequest


def test_every_proto_job_field_is_a_row_of_the_table() -> None:
    names = {f.name for f in fields.JOB_FIELDS}
    assert set(job_pb2.Job.DESCRIPTOR.fields_by_name) <= names


def test_every_proto_job_spec_field_is_a_field_of_the_stores_job_spec() -> None:
    assert set(job_pb2.JobSpec.DESCRIPTOR.fields_by_name) <= set(JobSpec.__dataclass_fields__)


def test_a_job_keeps_the_job_spec_fields_that_are_not_the_stores_business() -> None:
    assert fields.COPIED == ("content_type", "labels", "pool")


def test_the_claim_stamps_the_start_time_every_time() -> None:
    assert fields.stamped("claim") == (("start_time", fields.Stamp.ALWAYS),)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tenant", "acme"),
        ("attempts", 3),
        ("progress", 0.25),
        ("cancel_requested", True),
        ("create_time", datetime(2026, 12, 3, 10, 0, 0, 123000, tzinfo=UTC)),
        ("end_time", None),
        ("run_timeout", timedelta(seconds=90)),
        ("labels", {"b": "2", "a": "1"}),
        ("status", JobStatus.PARTIAL),
        ("kind", JobKind.CHILD),
        ("priority", Priority.SYSTEM),
    ],
)
def test_a_value_comes_back_from_the_redis_record_as_it_went_in(name: str, value: object) -> None:
    row = next(f for f in fields.JOB_FIELDS if f.name == name)
    assert fields.decode(row.kind, fields.encode(name, value).encode()) == value


def test_a_job_comes_back_from_a_record_whole() -> None:
    now = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    job = Job("01J", "acme", JobKind.SINGLE, JobStatus.QUEUED, Priority.BATCH, "m", now, now,
              labels={"k": "v"}, pool="onprem", run_timeout=timedelta(seconds=5))  # fmt: skip
    record = {f.name: fields.encode(f.name, getattr(job, f.name)).encode() for f in fields.STORED}
    assert fields.from_record(record) == job


def _keyed(spec: JobSpec | GroupSpec) -> SubmitRequest:
    return SubmitRequest("acme", spec, idempotency_key="k")


def test_a_fingerprint_of_the_original_fields_never_changes() -> None:
    # the digest a keyed job carries must survive an upgrade that adds fields
    spec = JobSpec("m", b"x", "ct", {"b": "1", "a": "2"}, 2, timedelta(seconds=5), None)
    group = GroupSpec((JobSpec("m"), JobSpec("n", labels={"x": "y"})), 2)
    assert _keyed(spec).fingerprint() == (
        "20625ad3591daa59eda50d775e0fac050b0ba5e505306c7eb9145afbdae42597"
    )
    assert _keyed(group).fingerprint() == (
        "6fd896383f706357f7e46210f7f5bc42eee47577b03160d0ccbe0c46e3d0b1ab"
    )


def test_a_later_field_is_in_the_fingerprint_once_set() -> None:
    plain = _keyed(JobSpec("m"))
    assert _keyed(JobSpec("m", pool="")).fingerprint() == plain.fingerprint()
    assert _keyed(JobSpec("m", pool="onprem")).fingerprint() != plain.fingerprint()
