"""Plain-text tables for the list views (list, retry --dry-run, workers, queues).

Columns are padded to their widest cell and joined by two spaces; counts line
up on the right. On a terminal a column may colour its cells (job statuses,
so FAILED stands out at a glance); the colour goes on after padding, so the
escape codes never skew the widths. NO_COLOR (no-color.org) or TERM=dumb
turns colour off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

from google.protobuf import timestamp_pb2

_RESET = "\x1b[0m"


@dataclass(frozen=True)
class Column:
    """One column: its header, whether it lines up on the right, and its colour."""

    header: str
    right: bool = False
    #: The ANSI SGR code ("31" is red) a cell is drawn in, "" for none.
    colour: Callable[[str], str] | None = None


def table(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, colour: bool) -> str:
    """The header line and one line per row, without a trailing newline."""
    widths = [
        max([len(column.header), *(len(row[i]) for row in rows)])
        for i, column in enumerate(columns)
    ]
    lines = [_line(columns, [c.header for c in columns], widths, colour=False)]
    lines += [_line(columns, row, widths, colour=colour) for row in rows]
    return "\n".join(lines)


def _line(
    columns: Sequence[Column], cells: Sequence[str], widths: Sequence[int], *, colour: bool
) -> str:
    drawn = []
    for column, cell, width in zip(columns, cells, widths, strict=True):
        padded = cell.rjust(width) if column.right else cell.ljust(width)
        code = column.colour(cell) if colour and column.colour else ""
        drawn.append(f"\x1b[{code}m{padded}{_RESET}" if code else padded)
    return "  ".join(drawn).rstrip()


def use_colour(out: TextIO) -> bool:
    """Colour only on a terminal, and not when the user asked for none."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return out.isatty()


def age(stamp: timestamp_pb2.Timestamp, now: datetime) -> str:
    """How long ago `stamp` was, in its largest unit: '45s', '3m', '2h', '5d'; '-' if unset."""
    if not stamp.seconds and not stamp.nanos:
        return "-"
    seconds = max(0, int((now - stamp.ToDatetime(tzinfo=UTC)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def utc_now() -> datetime:
    return datetime.now(UTC)
