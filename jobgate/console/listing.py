"""Filters and merged walks for the job lists.

`with_term` edits a ListJobs filter the way the quick filters need: replace
(or drop) the `field = value` term of one field and keep the rest of what
the person typed. The grammar is DESIGN's: comparisons joined by `AND`.

`/failed` lists FAILED and PARTIAL jobs, but a filter cannot say OR, so it
is two walks merged newest first. Its page token (`MergedCursor`) holds each
walk's ListJobs token for the page where its first unshown job is, plus the
sort key of the last job shown; a page re-reads each walk from its token and
skips what is not older than that key. So every job of the two walks is
shown exactly once, in order, with pages of a fixed size.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from jobgate.v1 import job_pb2

_TERM_SPLIT = re.compile(r"\s+AND\s+")
_QUOTED = re.compile(r'("(?:[^"\\]|\\.)*")')
_MASK = re.compile("\x00(\\d+)\x00")
_BARE = re.compile(r"[A-Za-z0-9._-]+")
_FIELD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(=|<=|>=|<|>)")


def split_terms(expression: str) -> list[str]:
    """The comparisons of an AND-joined filter (an `AND` inside quotes is kept)."""
    pieces = _QUOTED.split(expression)
    # Mask the quoted strings, split on AND, then put them back.
    masked = "".join(p if i % 2 == 0 else f"\x00{i}\x00" for i, p in enumerate(pieces))
    terms = _TERM_SPLIT.split(f" {masked} ")
    return [
        _MASK.sub(lambda m: pieces[int(m.group(1))], term).strip() for term in terms if term.strip()
    ]


def term_field(term: str) -> tuple[str, str] | None:
    """(field, operator) of a comparison, or None when it is not one."""
    match = _FIELD.match(term)
    return (match.group(1), match.group(2)) if match else None


def quote(value: str) -> str:
    if _BARE.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def with_term(expression: str, field: str, value: str) -> str:
    """`expression` with its `field = ...` terms replaced by `field = value` ("": dropped)."""
    kept = [term for term in split_terms(expression) if term_field(term) != (field, "=")]
    if value:
        kept.append(f"{field} = {quote(value)}")
    return " AND ".join(kept)


def term_value(expression: str, field: str) -> str:
    """The value of the `field = value` term, unquoted; "" when there is none."""
    for term in split_terms(expression):
        if term_field(term) == (field, "="):
            raw = term.split("=", 1)[1].strip()
            if len(raw) >= 2 and raw[0] == raw[-1] == '"':
                return re.sub(r"\\(.)", r"\1", raw[1:-1])
            return raw
    return ""


# ---------------------------------------------------------------- merged walks

SortKey = tuple[int, str]  # (create_time in ns, id): ListJobs orders by it, descending


def sort_key(job: job_pb2.Job) -> SortKey:
    return (job.create_time.ToNanoseconds(), job.id)


@dataclass(frozen=True)
class MergedCursor:
    """Where a merged walk stands: per walk, its token ("" = start; None = done)."""

    tokens: tuple[str | None, ...]
    after: SortKey | None = None

    def encode(self) -> str:
        document = {"t": list(self.tokens), "a": list(self.after) if self.after else None}
        return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, walks: int) -> MergedCursor:
        """Raises ValueError for a token that is not one of ours."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            document = json.loads(raw)
            tokens = tuple(document["t"])
            after = document["a"]
        except (ValueError, KeyError, TypeError):
            raise ValueError("page token does not decode") from None
        if len(tokens) != walks or not all(t is None or isinstance(t, str) for t in tokens):
            raise ValueError("page token does not fit this list")
        if after is not None and not (
            isinstance(after, list)
            and len(after) == 2
            and isinstance(after[0], int)
            and isinstance(after[1], str)
        ):
            raise ValueError("page token does not decode")
        return cls(tokens, (after[0], after[1]) if after is not None else None)

    @property
    def done(self) -> bool:
        return all(token is None for token in self.tokens)


#: Reads one page of one walk: (filter, page_token) -> (jobs, next_page_token).
PageReader = Callable[[str, str], Awaitable[tuple[list[job_pb2.Job], str]]]


@dataclass
class _Walk:
    filter: str
    token: str | None  # the token of `buffer`'s page; None once exhausted
    buffer: list[job_pb2.Job]
    next_token: str  # the token after `buffer`'s page


async def merged_page(
    read: PageReader, filters: Sequence[str], cursor: MergedCursor, size: int
) -> tuple[list[job_pb2.Job], MergedCursor]:
    """Up to `size` jobs of the walks of `filters` after `cursor`, newest first."""
    walks = [_Walk(f, t, [], "") for f, t in zip(filters, cursor.tokens, strict=True)]
    for walk in walks:
        await _fill(read, walk, cursor.after)
    shown: list[job_pb2.Job] = []
    while len(shown) < size:
        candidates = [w for w in walks if w.buffer]
        if not candidates:
            break
        walk = max(candidates, key=lambda w: sort_key(w.buffer[0]))
        shown.append(walk.buffer.pop(0))
        if not walk.buffer:
            await _advance(read, walk, sort_key(shown[-1]))
    after = sort_key(shown[-1]) if shown else cursor.after
    return shown, MergedCursor(tuple(w.token for w in walks), after)


async def _fill(read: PageReader, walk: _Walk, after: SortKey | None) -> None:
    """Read `walk` from its token until its buffer has a job older than `after`."""
    while walk.token is not None:
        jobs, walk.next_token = await read(walk.filter, walk.token)
        walk.buffer = [job for job in jobs if after is None or sort_key(job) < after]
        if walk.buffer:
            return
        walk.token = walk.next_token or None


async def _advance(read: PageReader, walk: _Walk, after: SortKey) -> None:
    walk.token = walk.next_token or None
    await _fill(read, walk, after)
