"""Request validation: each rule names the field it checks.

Checks collect every violation of a request (`Violations`), then raise one
`ValidationError`, which the error mapping turns into INVALID_ARGUMENT with
a `google.rpc.BadRequest` listing them. The limits are the API contract's
(proto comments) plus the server's --max-payload-bytes and
--max-group-children. A rule that names an input value in a field path
(a label key) quotes at most MAX_QUOTED_INPUT_BYTES of it (`quote`), so an
answer stays within gRPC's metadata limit however large the input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from google.protobuf import duration_pb2

from jobgate.v1.errors import FieldViolation
from jobgate.v1.limits import (
    JOB_ID_PATTERN,
    MAX_LABEL_KEY_BYTES,
    MAX_LABEL_VALUE_BYTES,
    MAX_LABELS,
    MAX_QUOTED_INPUT_BYTES,
    MODEL_PATTERN,
    POOL_PATTERN,
    clip_utf8,
)

__all__ = ["MAX_VIOLATIONS_REPORTED", "FieldViolation", "ValidationError", "Violations", "quote"]

# A huge bad group would otherwise list a violation per child.
MAX_VIOLATIONS_REPORTED = 20


def quote(value: str) -> str:
    """`value` as a Python literal, cut to MAX_QUOTED_INPUT_BYTES (marked with ...)."""
    clipped = clip_utf8(value, MAX_QUOTED_INPUT_BYTES)
    return repr(clipped) + ("..." if clipped != value else "")


class ValidationError(Exception):
    """One or more field violations: INVALID_ARGUMENT with BadRequest."""

    def __init__(self, violations: Sequence[FieldViolation]) -> None:
        self.violations = tuple(violations)
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in self.violations))


@dataclass
class Violations:
    """Collects violations; `raise_if_any()` at the end of a request's checks."""

    items: list[FieldViolation] = field(default_factory=list)

    def add(self, field_path: str, description: str) -> None:
        if len(self.items) < MAX_VIOLATIONS_REPORTED:
            self.items.append(FieldViolation(field_path, description))

    def raise_if_any(self) -> None:
        if self.items:
            raise ValidationError(self.items)

    def model(self, path: str, value: str) -> None:
        if not value:
            self.add(path, "required")
        elif not MODEL_PATTERN.fullmatch(value):
            self.add(path, "must match [a-z0-9][a-z0-9._-]{0,63}")

    def pool(self, path: str, value: str) -> None:
        """A pool name, or empty (any pool / the caller's default)."""
        if value and not POOL_PATTERN.fullmatch(value):
            self.add(path, f"must be empty or match {POOL_PATTERN.pattern}")

    def max_bytes(self, path: str, value: str | bytes, limit: int) -> None:
        size = len(value.encode() if isinstance(value, str) else value)
        if size > limit:
            self.add(path, f"at most {limit} bytes (got {size})")

    def printable_ascii(self, path: str, value: str, limit: int, required: bool) -> None:
        if not value:
            if required:
                self.add(path, "required")
            return
        if len(value) > limit or not value.isascii() or not value.isprintable():
            self.add(path, f"must be 1 to {limit} bytes of printable ASCII")

    def int_range(self, path: str, value: int, low: int, high: int) -> None:
        if not low <= value <= high:
            self.add(path, f"must be between {low} and {high} (got {value})")

    def duration(self, path: str, value: duration_pb2.Duration, max_seconds: float) -> None:
        seconds = value.seconds + value.nanos / 1e9
        if value.seconds < 0 or value.nanos < 0:
            self.add(path, "must not be negative")
        elif value.nanos >= 1_000_000_000 or seconds > max_seconds:
            self.add(path, f"must be at most {max_seconds:g} seconds")

    def labels(self, path: str, labels: Mapping[str, str]) -> None:
        if len(labels) > MAX_LABELS:
            self.add(path, f"at most {MAX_LABELS} entries (got {len(labels)})")
        for key, value in labels.items():
            entry = f"{path}[{quote(key)}]"
            if not 1 <= len(key.encode()) <= MAX_LABEL_KEY_BYTES:
                self.add(entry, f"key must be 1 to {MAX_LABEL_KEY_BYTES} bytes")
            if len(value.encode()) > MAX_LABEL_VALUE_BYTES:
                self.add(entry, f"value at most {MAX_LABEL_VALUE_BYTES} bytes")

    def job_id(self, path: str, value: str) -> None:
        if not value:
            self.add(path, "required")
            return
        if not JOB_ID_PATTERN.fullmatch(value):
            self.add(path, "must be a job id (a 26-character ULID)")

    def fraction(self, path: str, value: float) -> None:
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            self.add(path, "must be between 0 and 1")

    def enum(self, path: str, value: int, allowed: Sequence[int], names: str) -> None:
        if value not in allowed:
            self.add(path, f"must be one of {names} (got {value})")
