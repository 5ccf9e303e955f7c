"""Reading records back from the file: the restart's two steps.

A restart loads first what answers need at once, the open records (no
expiry set: queued and leased work, held children, the groups still
running, with every blob), and the store starts answering on them; the
finished records (an expiry set: most of a big file) follow on a thread of
their own with its own read-only connection, in chunks, so commits go on
meanwhile (store/journal/journal.py `load_closed`). Which rows each step
reads: schema.py `open_records`. The blob fields named lazy (payloads)
stay on disk for finished records, read back on first use.

One query per step: each blob's data comes through a LEFT JOIN, so SQLite
does the per-record lookups (a lookup per record from Python cost a second
per 100,000).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from store.journal.codec import UNLOADED
from store.journal.schema import Tables, open_records, record_select

#: Records per chunk of the finished ones: each is merged on the event loop
#: in one go (a few tens of milliseconds), answers run between chunks.
CLOSED_CHUNK = 20_000
#: Keys per `IN (...)` of read_keyed (under SQLite's 999 variables).
KEYED_CHUNK = 500


def read_records(
    con: sqlite3.Connection,
    tables: Tables,
    *,
    closed: bool,
    lazy: Collection[str],
    chunk: int = CLOSED_CHUNK,
) -> Iterator[dict[Any, Any]]:
    """The open (or the closed) records by key, `chunk` at a time; a closed
    record's lazy blob fields are UNLOADED, every other blob is read."""
    codec = tables.records
    joined = [name for name in codec.blobs if not (closed and name in lazy)]
    build = codec.joined_builder(joined, UNLOADED)
    key_index = codec.names.index(codec.key)
    where = open_records(tables)[1 if closed else 0]
    cursor = con.execute(record_select(tables, where, joined))
    while rows := cursor.fetchmany(chunk):
        yield {row[key_index]: build(row) for row in rows}


def read_keyed(
    con: sqlite3.Connection, tables: Tables, keys: Sequence[Any], lazy: Collection[str]
) -> dict[Any, Any]:
    """The records of `keys` by key, their lazy blob fields UNLOADED (the few
    finished records an open one refers to: a group's kept children)."""
    codec = tables.records
    joined = [name for name in codec.blobs if name not in lazy]
    build = codec.joined_builder(joined, UNLOADED)
    key_index = codec.names.index(codec.key)
    records: dict[Any, Any] = {}
    for start in range(0, len(keys), KEYED_CHUNK):
        chunk = keys[start : start + KEYED_CHUNK]
        where = f"r.{codec.key} IN ({', '.join('?' * len(chunk))})"
        for row in con.execute(record_select(tables, where, joined), chunk):
            records[row[key_index]] = build(row)
    return records


def read_closed(
    path: Path,
    tables: Tables,
    lazy: Collection[str],
    deliver: Callable[[dict[Any, Any]], None],
    stop: threading.Event,
) -> None:
    """Every closed record, chunk by chunk to `deliver`, on a read-only connection
    of its own (WAL: one snapshot, while the writer commits); stops early on `stop`."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for records in read_records(con, tables, closed=True, lazy=lazy):
            if stop.is_set():
                return
            deliver(records)
    finally:
        con.close()
