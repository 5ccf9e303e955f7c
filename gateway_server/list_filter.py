"""ListJobs' filter: DESIGN's grammar (a small part of AIP-160) into store.model.JobFilter.

    filter = [ term { "AND" term } ]
    term   = field op value
    field  = status | kind | priority | model | pool | parent_id | error_code
           | tenant | create_time | "labels." key
    op     = "=" | "<" | "<=" | ">" | ">="     (create_time: <, <=, >, >=; the rest: =)
    key    = bare | quoted                      value = bare | quoted
    bare   = one or more characters other than whitespace, '"', '(', ')', '=', '<', '>'
    quoted = '"' { any character but '"' and '\\', or \\" or \\\\ } '"'

Decisions where DESIGN is silent (docs/list-jobs.md has the reasons):
- `AND` is upper-case only, as AIP-160 spells it; `and`, `OR` and `NOT` are
  refused by name. Field names are lower-case, as in the proto.
- status, kind and priority take the enum value name without its prefix, in
  any case (`FAILED`, `failed`); the full name (`JOB_STATUS_FAILED`) is
  accepted too. `_UNSPECIFIED` is refused: no stored job has it.
- A value must be one a job can hold: model and pool follow the model rule
  (`pool = ""` finds the jobs bound to any pool), parent_id is a job id
  (upper-cased: ULIDs ignore case), error_code is empty or UPPER_SNAKE,
  tenant follows the tenant rule, a label key is 1..63 bytes and its value
  at most 255. A filter that could only ever match nothing is a mistake
  better reported than answered with an empty page.
- A field given twice is refused (joined by AND, `status = FAILED AND status
  = QUEUED` can match nothing: the caller meant something else), except
  create_time, which takes at most one lower bound (> or >=) and one upper
  bound (< or <=). Two terms on different label keys are fine.
- `tenant` is refused unless the caller sees every tenant (an admin).
- create_time takes an RFC 3339 date-time (`2026-12-01T00:00:00Z`,
  `...T01:00:00.5+01:00`; quoted or bare), held as an aware UTC datetime;
  digits past microseconds are dropped.

Every refusal is a ValidationError naming `filter` that says at which
character offset (from 0) understanding stopped, quoting at most 128 bytes
of the text from there. Terms keep their written order (the store lets the
first indexed one drive). `format_filter` writes the canonical text back:
parsing it gives the same JobFilter, and page tokens are bound to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import TypeVar

from jobgate.v1.limits import (
    ERROR_CODE_PATTERN,
    JOB_ID_PATTERN,
    MAX_LABEL_KEY_BYTES,
    MAX_LABEL_VALUE_BYTES,
    MODEL_PATTERN,
    POOL_PATTERN,
)
from serving.auth import TENANT_PATTERN
from serving.violations import FieldViolation, ValidationError, quote
from store.model import (
    FILTER_FIELDS,
    FilterTerm,
    FilterValue,
    JobFilter,
    JobKind,
    JobStatus,
    Priority,
)

FIELD = "filter"
LABELS = "labels."
_ENUM_PREFIXES = {"status": "JOB_STATUS_", "kind": "JOB_KIND_", "priority": "PRIORITY_"}
_LOWER_BOUNDS = (">", ">=")
_UPPER_BOUNDS = ("<", "<=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATOR = re.compile(r"<=|>=|!=|=|<|>|:")
_BARE = re.compile(r'[^\s"()=<>]+')
_SPACE = re.compile(r"\s*")
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:[Zz]|([+-])(\d{2}):([0-5]\d))",
    re.ASCII,  # \d: the digits 0-9 only, not every script's
)
E = TypeVar("E", bound=Enum)


def parse_filter(text: str, *, may_filter_tenant: bool = False) -> JobFilter:
    """The JobFilter `text` says; ValidationError naming `filter` where it does not parse."""
    return _Parser(text, may_filter_tenant).parse()


class _Refused(Exception):
    def __init__(self, offset: int, what: str) -> None:
        self.offset = offset
        self.what = what


@dataclass
class _Parser:
    text: str
    may_filter_tenant: bool
    pos: int = 0

    def parse(self) -> JobFilter:
        try:
            return JobFilter(tuple(self._terms()))
        except _Refused as refused:
            raise _error(self.text, refused.offset, refused.what) from None

    def _terms(self) -> list[FilterTerm]:
        terms: list[FilterTerm] = []
        self._skip_space()
        if self._at_end():
            return terms
        while True:
            start = self.pos
            term = self._term()
            _check_repeat(terms, term, start)
            terms.append(term)
            self._skip_space()
            if self._at_end():
                return terms
            self._conjunction()

    def _term(self) -> FilterTerm:
        start = self.pos
        field = self._field()
        if field == "tenant" and not self.may_filter_tenant:
            raise _Refused(start, "tenant may be filtered on by admin callers only")
        self._skip_space()
        op = self._operator(field)
        self._skip_space()
        value_at = self.pos
        raw = self._value()
        try:
            return FilterTerm(field, op, _typed(field, raw))
        except ValueError as error:
            raise _Refused(value_at, str(error)) from None

    def _field(self) -> str:
        if self.text.startswith(LABELS, self.pos):
            self.pos += len(LABELS)
            key_at = self.pos
            key = self._string("a label key")
            if not 1 <= len(key.encode()) <= MAX_LABEL_KEY_BYTES:
                raise _Refused(key_at, f"a label key is 1 to {MAX_LABEL_KEY_BYTES} bytes")
            return LABELS + key
        match = _NAME.match(self.text, self.pos)
        name = match.group() if match else ""
        if name not in FILTER_FIELDS:
            known = ", ".join((*FILTER_FIELDS, "labels.<key>"))
            raise _Refused(self.pos, f"expected a field name ({known})")
        self.pos += len(name)
        return name

    def _operator(self, field: str) -> str:
        match = _OPERATOR.match(self.text, self.pos)
        op = match.group() if match else ""
        if not op:
            raise _Refused(self.pos, f"expected an operator after {_shown(field)}")
        if field == "create_time" and op not in (*_LOWER_BOUNDS, *_UPPER_BOUNDS):
            raise _Refused(self.pos, "create_time is compared with <, <=, > or >=")
        if field != "create_time" and op != "=":
            raise _Refused(self.pos, f"{_shown(field)} is compared with = only")
        self.pos += len(op)
        return op

    def _value(self) -> str:
        return self._string("a value")

    def _string(self, what: str) -> str:
        """A quoted string (\\" and \\\\ escapes) or a bare word."""
        if self.pos < len(self.text) and self.text[self.pos] == '"':
            return self._quoted()
        match = _BARE.match(self.text, self.pos)
        if match is None:
            raise _Refused(self.pos, f'expected {what} (quote it if it holds spaces or =<>()")')
        self.pos = match.end()
        return match.group()

    def _quoted(self) -> str:
        opening = self.pos
        self.pos += 1
        chars: list[str] = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(chars)
            if char == "\\":
                escaped = self.text[self.pos + 1 : self.pos + 2]
                if escaped not in ('"', "\\"):
                    raise _Refused(self.pos, 'only \\" and \\\\ are escapes in a quoted string')
                char = escaped
                self.pos += 1
            chars.append(char)
            self.pos += 1
        raise _Refused(opening, "this quoted string is not closed")

    def _conjunction(self) -> None:
        match = _NAME.match(self.text, self.pos)
        word = match.group() if match else ""
        if word == "AND":
            self.pos += len(word)
            if self._at_end() or not self.text[self.pos].isspace():
                raise _Refused(self.pos, "expected a space and a term after AND")
            self._skip_space()
            return
        if word.upper() == "AND":
            raise _Refused(self.pos, "AND is written in upper case")
        if word.upper() in ("OR", "NOT"):
            raise _Refused(self.pos, "terms are joined by AND only (no OR, no NOT)")
        raise _Refused(self.pos, "expected AND or the end of the filter")

    def _skip_space(self) -> None:
        match = _SPACE.match(self.text, self.pos)
        assert match is not None  # \s* matches everywhere
        self.pos = match.end()

    def _at_end(self) -> bool:
        return self.pos >= len(self.text)


def _error(text: str, offset: int, what: str) -> ValidationError:
    where = quote(text[offset:]) if offset < len(text) else "the end"
    return ValidationError([FieldViolation(FIELD, f"at offset {offset} ({where}): {what}")])


def _check_repeat(terms: list[FilterTerm], term: FilterTerm, offset: int) -> None:
    """A field at most once; create_time at most once per side."""
    for earlier in terms:
        if earlier.field != term.field:
            continue
        if term.field != "create_time":
            raise _Refused(offset, f"{_shown(term.field)} is given twice (terms are ANDed)")
        if (earlier.op in _LOWER_BOUNDS) == (term.op in _LOWER_BOUNDS):
            side = "lower (> or >=)" if term.op in _LOWER_BOUNDS else "upper (< or <=)"
            raise _Refused(offset, f"create_time has a {side} bound already")


def _shown(field: str) -> str:
    if field.startswith(LABELS):
        return LABELS + quote(field[len(LABELS) :])
    return field


def _typed(field: str, raw: str) -> FilterValue:
    """The value of `field` as the store compares it; ValueError says what is wrong."""
    if field == "status":
        return _enum_value(JobStatus, raw, field)
    if field == "kind":
        return _enum_value(JobKind, raw, field)
    if field == "priority":
        return _enum_value(Priority, raw, field)
    if field == "create_time":
        return parse_rfc3339(raw)
    if field.startswith(LABELS):
        if len(raw.encode()) > MAX_LABEL_VALUE_BYTES:
            raise ValueError(f"a label value is at most {MAX_LABEL_VALUE_BYTES} bytes")
        return raw
    return _STRING_RULES[field](raw)


def _enum_value(kind: type[E], raw: str, field: str) -> E:
    name = raw.upper().removeprefix(_ENUM_PREFIXES[field])
    try:
        return kind[name]
    except KeyError:
        names = ", ".join(member.name for member in kind)
        raise ValueError(f"{field} is one of {names}") from None


def _pattern_rule(pattern: re.Pattern[str], what: str, empty: bool = False) -> Callable[[str], str]:
    def check(raw: str) -> str:
        if (raw or not empty) and not pattern.fullmatch(raw):
            shown = f"empty or {what}" if empty else what
            raise ValueError(f"must be {shown}")
        return raw

    return check


def _job_id(raw: str) -> str:
    if not JOB_ID_PATTERN.fullmatch(raw):
        raise ValueError("parent_id must be a job id (a 26-character ULID)")
    return raw.upper()


_STRING_RULES: dict[str, Callable[[str], str]] = {
    "model": _pattern_rule(MODEL_PATTERN, f"a model name matching {MODEL_PATTERN.pattern}"),
    "pool": _pattern_rule(POOL_PATTERN, f"a pool name matching {POOL_PATTERN.pattern}", True),
    "parent_id": _job_id,
    "error_code": _pattern_rule(ERROR_CODE_PATTERN, f"matching {ERROR_CODE_PATTERN.pattern}", True),
    "tenant": _pattern_rule(TENANT_PATTERN, f"a tenant matching {TENANT_PATTERN.pattern}"),
}


def parse_rfc3339(raw: str) -> datetime:
    """An RFC 3339 date-time as an aware UTC datetime (microseconds; finer digits dropped)."""
    match = _RFC3339.fullmatch(raw)
    if match is None:
        raise ValueError("create_time takes an RFC 3339 time such as 2026-12-01T00:00:00Z")
    year, month, day, hour, minute, second = (int(part) for part in match.group(1, 2, 3, 4, 5, 6))
    micros = int((match.group(7) or "0")[:6].ljust(6, "0"))
    offset = timedelta(0)
    if match.group(8):
        offset = timedelta(hours=int(match.group(9)), minutes=int(match.group(10)))
        offset = -offset if match.group(8) == "-" else offset
    try:
        zone = timezone(offset)
        value = datetime(year, month, day, hour, minute, second, micros, tzinfo=zone)
        return value.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ValueError("create_time is not a real moment (check the date and offset)") from None


def format_rfc3339(value: datetime) -> str:
    """`value` in UTC as RFC 3339 with microseconds (strftime's %Y does not pad year 999)."""
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}"
        f".{v.microsecond:06d}Z"
    )


def format_filter(job_filter: JobFilter) -> str:
    """The canonical text of `job_filter`: parse_filter gives it back unchanged."""
    return " AND ".join(
        f"{_field_text(term.field)} {term.op} {_value_text(term.value)}"
        for term in job_filter.terms
    )


def _field_text(field: str) -> str:
    if field.startswith(LABELS):
        return LABELS + _string_text(field[len(LABELS) :])
    return field


def _value_text(value: FilterValue) -> str:
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, datetime):
        return format_rfc3339(value)
    return _string_text(value)


def _string_text(value: str) -> str:
    if _BARE.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
