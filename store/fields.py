"""The Job's fields as data: one table, read off `store.model.Job`, drives every copy of a job.

Each field of the `Job` dataclass is a row: its name, its kind (from its
type), whether the stores keep it in the job's record (queue_position and
a group's children are computed, the result is kept apart), and the
transitions that stamp it with the store's clock. From the table come the
Redis record codec (store/redis/codec.py), LocalEngine's snapshot
(store/memory/state.py), the proto converter (serving/convert.py), the
fields a JobSpec hands to its job (`COPIED`), and the stamps both stores
apply (`stamped`; the Lua side is generated, store/policy.py). So a new
output field is the proto, one `Job` attribute and its tests; one that a
JobSpec carries is also one `JobSpec` attribute (and its validation).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from store.model import Job, JobKind, JobSpec, JobStatus, Priority


class Kind(Enum):
    TEXT = "text"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    TIME = "time"  # a datetime, stored as epoch milliseconds
    OPTIONAL_TIME = "optional_time"
    DURATION = "duration"  # a timedelta, stored as milliseconds
    LABELS = "labels"  # a str -> str mapping, stored as JSON
    STATUS = "status"
    KIND = "kind"
    PRIORITY = "priority"
    OTHER = "other"  # computed or kept apart: never in the record


class Stamp(Enum):
    """How a transition stamps a field with the store's clock."""

    ALWAYS = "always"
    ONCE = "once"  # only the first time (the field still unset)


_KINDS: Mapping[object, Kind] = {
    str: Kind.TEXT,
    int: Kind.INT,
    float: Kind.FLOAT,
    bool: Kind.BOOL,
    datetime: Kind.TIME,
    datetime | None: Kind.OPTIONAL_TIME,
    timedelta: Kind.DURATION,
    Mapping[str, str]: Kind.LABELS,
    JobStatus: Kind.STATUS,
    JobKind: Kind.KIND,
    Priority: Kind.PRIORITY,
}


@dataclass(frozen=True)
class JobField:
    name: str
    kind: Kind
    #: Kept in the job's record (the Redis hash, LocalEngine's Record).
    stored: bool
    #: transition name -> how it stamps this field with the clock.
    stamps: Mapping[str, Stamp]


def _row(field: dataclasses.Field[Any], hints: Mapping[str, object]) -> JobField:
    stored = bool(field.metadata.get("stored", True))
    kind = _KINDS.get(hints[field.name], Kind.OTHER) if stored else Kind.OTHER
    if stored and kind is Kind.OTHER:
        raise TypeError(f"Job.{field.name}: no record codec for {hints[field.name]!r}")
    stamps = {name: Stamp(how) for name, how in field.metadata.get("stamps", {}).items()}
    return JobField(field.name, kind, stored, stamps)


def _table() -> tuple[JobField, ...]:
    hints = typing.get_type_hints(Job)
    return tuple(_row(field, hints) for field in dataclasses.fields(Job))


JOB_FIELDS: tuple[JobField, ...] = _table()
STORED: tuple[JobField, ...] = tuple(f for f in JOB_FIELDS if f.stored)
_BY_NAME = {f.name: f for f in JOB_FIELDS}

#: JobSpec fields a job keeps as they were submitted (in its record, under the
#: same name). The others are the store's business: model and the limits
#: (policy.limits fills defaults in), payload (kept apart).
COPIED: tuple[str, ...] = tuple(
    f.name
    for f in dataclasses.fields(JobSpec)
    if f.name in _BY_NAME
    and f.name not in ("model", "max_attempts", "queue_timeout", "run_timeout")
)


@functools.cache
def stamped(transition: str) -> tuple[tuple[str, Stamp], ...]:
    """The fields `transition` stamps with the clock, and how (read once a transition:
    LocalEngine stamps on every claim)."""
    return tuple((f.name, f.stamps[transition]) for f in JOB_FIELDS if transition in f.stamps)


def copied(spec: JobSpec) -> dict[str, object]:
    """The JobSpec values its job keeps (COPIED)."""
    return {name: getattr(spec, name) for name in COPIED}


# -- the Redis record: every value a string ----------------------------------------


def to_ms(delta: timedelta) -> int:
    return round(delta.total_seconds() * 1000)


def ms_to_datetime(ms: int | bytes | str) -> datetime:
    return datetime.fromtimestamp(int(ms) / 1000, tz=UTC)


def encode(name: str, value: object) -> str:
    """A field's value as the Redis record holds it."""
    kind = _BY_NAME[name].kind
    if kind is Kind.LABELS:
        assert isinstance(value, Mapping)
        return json.dumps(dict(value), sort_keys=True)
    if kind is Kind.BOOL:
        return "1" if value else "0"
    if kind in (Kind.TIME, Kind.OPTIONAL_TIME):
        return "" if value is None else str(round(typing.cast(datetime, value).timestamp() * 1000))
    if kind is Kind.DURATION:
        return str(to_ms(typing.cast(timedelta, value)))
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def _time(raw: bytes) -> datetime | None:
    return ms_to_datetime(raw) if raw else None


#: decode() per kind as one function each, looked up once per field below:
#: the chain of kind tests cost most of a record's decoding (35 -> 20 us a job).
_DECODERS: dict[Kind, Callable[[bytes], object]] = {
    Kind.TEXT: bytes.decode,
    Kind.INT: lambda raw: int(raw) if raw else 0,
    Kind.FLOAT: lambda raw: float(raw) if raw else 0.0,
    Kind.BOOL: lambda raw: raw == b"1",
    Kind.TIME: _time,
    Kind.OPTIONAL_TIME: _time,
    Kind.DURATION: lambda raw: timedelta(milliseconds=int(raw) if raw else 0),
    Kind.LABELS: lambda raw: json.loads(raw or b"{}"),
    Kind.STATUS: lambda raw: JobStatus(raw.decode()),
    Kind.KIND: lambda raw: JobKind(raw.decode()),
    Kind.PRIORITY: lambda raw: Priority(int(raw)),
}
_STORED_DECODERS = tuple((f.name, _DECODERS[f.kind]) for f in STORED)


def decode(kind: Kind, raw: bytes) -> object:
    """A record value (present, maybe empty) as the field's type."""
    return _DECODERS[kind](raw)


def from_record(record: Mapping[str, bytes], **computed: object) -> Job:
    """A Job from a Redis record (str field -> bytes); `computed` fills in the rest."""
    values = {
        name: read(raw) for name, read in _STORED_DECODERS if (raw := record.get(name)) is not None
    }
    if values.get("update_time") is None:
        values["update_time"] = values["create_time"]
    return Job(**values, **computed)  # type: ignore[arg-type]
