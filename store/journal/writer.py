"""The journal's writer: the one connection that writes the file, used from one thread.

One caller at a time: the journal's flusher, which awaits each call. Under
`full` every call runs on the journal's dedicated thread (Journal's
executor). Under `normal` (`inline`) a commit is one `write()` to the
commit log (store/journal/log.py) on the event loop itself (`log`), and the
batches logged over `APPLY_EVERY` go to SQLite in one transaction, also on
the loop (`apply`); what may take milliseconds still runs on the thread:
the open (which replays a log a crash left) and loads, and the checkpoints
(`due_checkpoint`: SQLite's automatic one is off on an inline connection,
so the flusher hands the apply that crosses it to the thread, which
checkpoints after committing). One
`commit(work)` is ONE SQLite transaction, whatever it carries: the records
a batch of transitions touched, their audit events, changed meta values,
the TTL deletions that fell due and the audit cap (one fsync under
`synchronous=FULL`). A failure rolls the transaction back whole: the file
stays at the previous batch.

Growth is bounded: rows past their TTL and audit events past the cap are
deleted in the commits that find them due; the WAL is checkpointed by
SQLite every `wal_autocheckpoint` pages (inline: by `checkpoint_after`,
every WAL_AUTOCHECKPOINT_PAGES pages as estimated), truncated to `journal_size_limit`,
and truncated outright every `checkpoint_every` seconds (when no reader
holds it); pages freed by deletions are reused by later rows.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store.journal import log as commit_log
from store.journal.errors import DataDirRefused
from store.journal.loading import read_keyed, read_records
from store.journal.schema import EXPIRE_FIELD, Tables, check_header, corrupt, insert_sql, prepare

SYNC_MODES = {"full": "FULL", "normal": "NORMAL"}
#: Above this much room a commit estimates what it used instead of measuring
#: (three PRAGMAs and a statvfs, a fifth of a small commit's cost); measured
#: again at least every ROOM_MEASURE_EVERY seconds, and always below it.
ROOM_MEASURE_BELOW = 1 << 30
ROOM_MEASURE_EVERY = 1.0
#: What one row or event is taken to add to the file when the room is estimated.
ROW_BYTES = 1024
WAL_AUTOCHECKPOINT_PAGES = 1000
#: The WAL pages an inline commit is taken to add: a few b-tree pages per
#: table it touches, and per row or event (an overestimate: checkpoints come early).
PAGES_PER_COMMIT = 4
PAGES_PER_ROW = 1
JOURNAL_SIZE_LIMIT = 16 * 1024 * 1024
#: Under `normal`: logged batches are applied to SQLite once the oldest is this
#: old (seconds) or this many wait, and at every housekeeping, flush and close; a
#: batch that would bring the log to APPLY_BYTES (estimate_bytes) is not logged but
#: committed to SQLite with the log's batches (the log stays inside the disk reserve).
APPLY_EVERY = 0.05
APPLY_BATCHES = 256
APPLY_BYTES = 8 * 1024 * 1024


@dataclass
class Work:
    """One sealed batch: everything one commit writes (built on the event loop)."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    blobs: dict[str, list[tuple[Any, bytes]]] = field(default_factory=dict)  # upserts
    blob_deletes: dict[str, list[tuple[Any]]] = field(default_factory=dict)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    meta: list[tuple[str, str]] = field(default_factory=list)
    now: float = 0.0  # TTL deletions: rows whose expire_at <= now
    #: the journal's count of disk bytes reserved when this was sealed (Journal.check_room)
    reserved: int = 0
    #: filled by the commit: the keys whose rows (and blobs) its TTL deletions removed
    expired: list[Any] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.rows or self.events or self.meta)

    def batch(self) -> tuple[Any, ...]:
        """What the commit log keeps of it (builtin values only)."""
        return (self.rows, self.blobs, self.blob_deletes, self.events, self.meta, self.now)

    @classmethod
    def merged(cls, works: list[Work], now: float) -> Work:
        """One Work writing what `works` write, in their order (the last value of a
        row wins, as it would have in separate commits)."""
        merged = cls(now=now, reserved=works[-1].reserved if works else 0)
        for work in works:
            merged.rows += work.rows
            for name, upserts in work.blobs.items():
                merged.blobs.setdefault(name, []).extend(upserts)
            for name, keys in work.blob_deletes.items():
                merged.blob_deletes.setdefault(name, []).extend(keys)
            merged.events += work.events
            merged.meta += work.meta
        return merged


def estimate_bytes(work: Work) -> int:
    """What `work` may add to the file, over-estimated (the room between measures)."""
    added = ROW_BYTES * (len(work.rows) + len(work.events))
    return added + sum(len(blob) for upserts in work.blobs.values() for _, blob in upserts)


def _from_batch(batch: Any) -> Work:
    rows, blobs, blob_deletes, events, meta, now = batch
    return Work(rows, blobs, blob_deletes, events, meta, now)


@dataclass
class Loaded:
    """What the file held at open: records by key (the open ones, or all), the meta
    values, the newest events."""

    records: dict[Any, Any]
    meta: dict[str, Any]
    events: list[Any]


#: Blob fields a load leaves on disk (UNLOADED) for the finished records, read
#: back on first use; open records get every blob (store/journal/loading.py).
LazyBlobs = Collection[str]
#: The keys of the records a record needs beside it in memory (a group's children).
Companions = Callable[[Any], Iterable[Any]]


def no_companions(record: Any) -> Iterable[Any]:
    return ()


class Writer:
    """The writing connection and what it does; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        tables: Tables,
        sync: str,
        events_cap: int,
        checkpoint_every: float = 30.0,
        max_pages: int | None = None,
        inline: bool = False,
        log_limit: int = APPLY_BYTES,
    ) -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"data sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
        self.directory = directory
        self.path = directory / "jobgate.db"
        self.tables = tables
        self.sync = sync
        self.events_cap = max(1, events_cap)
        self.checkpoint_every = checkpoint_every
        self.max_pages = max_pages
        self.commits = 0  # group commits: transactions, or log writes (tests count batching)
        self.inline = inline
        #: inline (`normal`): the commit log, and the batches it holds that SQLite does not
        self.log_file = commit_log.CommitLog(directory)
        self._logged: list[Work] = []
        self.logged_bytes = 0  # what they may add to the file (estimate_bytes)
        self._log_seq = 0  # the last sequence number logged (or applied)
        self._oldest_logged = 0.0  # time.monotonic() the oldest of _logged was logged
        self._log_replayed = False  # until then, close() must leave the log file alone
        #: the log's bound in bytes besides APPLY_BYTES (the journal's: a part of its reserve)
        self.log_limit = log_limit
        self._wal_pages = 0  # inline: pages taken to be in the WAL since its last checkpoint
        self._con: sqlite3.Connection | None = None
        self._events_held = 0
        self._newest_event = 0
        self._page_size = 4096
        self._last_checkpoint = time.monotonic()
        self._room = 0
        self._room_measured = 0.0  # time.monotonic() of the last exact room()
        # The earliest expire_at the file may hold: commits before it skip the TTL deletes.
        self._next_expiry = 0.0
        records = tables.records
        self._expire_column = (
            records.names.index(EXPIRE_FIELD) if EXPIRE_FIELD in records.names else None
        )
        self._upsert_record = insert_sql("records", records.names, key=records.key)
        self._insert_event = insert_sql("events", tables.events.names)

    # -- open and load -------------------------------------------------------

    def open(self) -> None:
        """Check and open the file (creating it when new); DataDirRefused when unusable."""
        if self.path.exists():
            check_header(self.path)
        try:
            # Inline, commits come from the loop's thread and the rest from the
            # journal's: never at once (the flusher awaits each call).
            con = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as error:
            raise corrupt(self.path, str(error)) from None
        try:
            self._configure(con)
            prepare(con, self.tables, self.path)
        except sqlite3.DatabaseError as error:
            con.close()
            raise corrupt(self.path, str(error)) from None
        except BaseException:
            con.close()
            raise
        self._con = con
        self._page_size = int(con.execute("PRAGMA page_size").fetchone()[0])
        self._replay()

    def _replay(self) -> None:
        """Apply what a commit log left (a crash under `normal`) past what SQLite holds,
        in one transaction, before anything reads the file; then start the log again
        (inline) or remove it. Whatever this run's mode: the log is an earlier run's."""
        applied = self._applied_seq()
        try:
            replayed = list(commit_log.entries(self.log_file.read(), applied))
        except commit_log.LogDamaged as error:
            raise DataDirRefused(
                f"{self.log_file.path}: {error}; jobgate does not start on it (restore the "
                "directory from a backup, or move the log aside to lose its commits)"
            ) from None
        self._count_events()  # (the audit cap applies to what the replay adds)
        self._log_seq = replayed[-1][0] if replayed else applied
        if replayed:
            try:
                works = [_from_batch(batch) for _, batch in replayed]
            except (TypeError, ValueError) as error:
                raise DataDirRefused(
                    f"{self.log_file.path}: an entry is not a batch ({error}); jobgate does "
                    "not start on it (restore the directory from a backup)"
                ) from None
            try:
                self._transaction(works, works[-1].now, applied_seq=self._log_seq)
            except sqlite3.DatabaseError as error:
                raise DataDirRefused(
                    f"{self.log_file.path}: the commits it holds cannot be written to "
                    f"{self.path} ({error}); free space on the disk and start again"
                ) from None
        if self.inline:
            self.log_file.open()
            self.log_file.empty()
        else:
            self.log_file.close(remove=True)
        self._log_replayed = True

    def _applied_seq(self) -> int:
        row = self.con.execute(
            "SELECT value FROM meta WHERE name = ?", (commit_log.APPLIED,)
        ).fetchone()
        return 0 if row is None else int(json.loads(row[0]))

    def _configure(self, con: sqlite3.Connection) -> None:
        mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.DatabaseError(f"cannot use WAL mode (got {mode})")
        con.execute(f"PRAGMA synchronous = {SYNC_MODES[self.sync]}")
        # inline: no automatic checkpoint inside a commit on the loop (due_checkpoint)
        con.execute(f"PRAGMA wal_autocheckpoint = {0 if self.inline else WAL_AUTOCHECKPOINT_PAGES}")
        con.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        con.execute("PRAGMA busy_timeout = 200")  # a TRUNCATE checkpoint waits for readers briefly
        con.execute("PRAGMA cache_size = -65536")  # 64 MiB of page cache
        if self.max_pages is not None:  # tests: a full disk at this many pages
            con.execute(f"PRAGMA max_page_count = {self.max_pages}")

    def connection_settings(self) -> dict[str, Any]:
        con = self.con
        return {
            name: con.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "synchronous", "wal_autocheckpoint", "journal_size_limit")
        }

    @property
    def con(self) -> sqlite3.Connection:
        if self._con is None:
            raise RuntimeError("the journal writer is not open")
        return self._con

    def load_open(self, lazy: LazyBlobs, companions: Companions = no_companions) -> Loaded:
        """The open records (loading.py) and the records they name as companions,
        the meta values and the newest `events_cap` events."""
        return self._loaded(lazy, everything=False, companions=companions)

    def load(self, lazy: LazyBlobs) -> Loaded:
        """As load_open, with the finished records too (a reload after a failed commit)."""
        return self._loaded(lazy, everything=True, companions=no_companions)

    def _loaded(self, lazy: LazyBlobs, everything: bool, companions: Companions) -> Loaded:
        try:
            records: dict[Any, Any] = {}
            for closed in (False, True) if everything else (False,):
                for chunk in read_records(self.con, self.tables, closed=closed, lazy=lazy):
                    records.update(chunk)
            # An open record's companion is open too, but a file written before
            # redrive marked a retried group's kept children holds them finished.
            missing = [key for record in records.values() for key in companions(record)
                       if key not in records]  # fmt: skip
            if missing:
                records.update(read_keyed(self.con, self.tables, missing, lazy))
            meta = {
                name: json.loads(value)
                for name, value in self.con.execute("SELECT name, value FROM meta")
                if name != commit_log.APPLIED
            }
            return Loaded(records, meta, self._load_events())
        except sqlite3.DatabaseError as error:
            raise corrupt(self.path, str(error)) from None

    def _load_events(self) -> list[Any]:
        codec = self.tables.events
        newest = self._count_events()
        query = f"SELECT {', '.join(codec.names)} FROM events WHERE id > ? ORDER BY id"
        return [codec.build(row) for row in self.con.execute(query, (newest - self.events_cap,))]

    # -- the commit log (inline) ------------------------------------------------

    def log(self, work: Work) -> None:
        """Commit `work` by one write to the commit log; SQLite gets it at the next apply."""
        self._log_seq += 1
        try:
            self.log_file.append(commit_log.encode(self._log_seq, work.batch()))
        except BaseException:
            self._log_seq -= 1  # (a short write left a cut entry: a replay stops before it)
            raise
        if not self._logged:
            self._oldest_logged = time.monotonic()
        self._logged.append(work)
        self.logged_bytes += estimate_bytes(work)
        self.commits += 1

    @property
    def logged(self) -> int:
        """Batches in the commit log that SQLite does not hold yet."""
        return len(self._logged)

    def apply_at(self) -> float | None:
        """When (time.monotonic) the logged batches are due in SQLite; None if none wait."""
        if not self._logged:
            return None
        if len(self._logged) >= APPLY_BATCHES:
            return 0.0
        return self._oldest_logged + APPLY_EVERY

    def too_large_to_log(self, work: Work) -> bool:
        """Whether `work` would bring the log to APPLY_BYTES (or `log_limit`): commit it
        with apply() instead."""
        return self.logged_bytes + estimate_bytes(work) >= min(APPLY_BYTES, self.log_limit)

    def to_apply(self, now: float, unlogged: Work | None = None) -> Work:
        """What the logged batches (and `unlogged`) write, summed up as one Work (its
        size for the checkpoint and the room, the reserve it settles; TTL deletions
        due at `now`)."""
        return Work.merged([*self._logged, *([unlogged] if unlogged else [])], now)

    def apply(self, summary: Work, unlogged: Work | None = None, checkpoint: bool = False) -> int:
        """The logged batches into SQLite, each as it was logged, in order, then
        `unlogged` (a batch committed here instead of logged), in ONE transaction that
        records the log's last sequence number; then the log starts again. `summary`
        (from to_apply: the flusher awaits each call, so nothing is logged in between)
        gets the keys the TTL deletions removed. The room left. `checkpoint`: then
        checkpoint (on the thread, by due_checkpoint)."""
        works = [*self._logged, *([unlogged] if unlogged else [])]
        summary.expired = self._transaction(works, summary.now, self._log_seq)
        if unlogged is not None and not unlogged.empty:
            self.commits += 1
        self._logged.clear()  # (at once: nothing after the COMMIT may apply them twice)
        self.logged_bytes = 0
        with contextlib.suppress(OSError):  # (left in the log, they are past APPLIED: skipped)
            self.log_file.empty()
        if checkpoint:
            self._checkpoint_after_commit()
        return self._room_after(estimate_bytes(summary))

    def apply_all(self) -> None:
        """Whatever the log holds into SQLite, and the log emptied (before a reload reads
        the file: also of a write cut short; at close)."""
        if self._logged:
            self.apply(self.to_apply(self._logged[-1].now))
        elif self.inline:
            self.log_file.empty()

    def _count_events(self) -> int:
        """Count the events the file holds (the audit cap's trims); the newest's id."""
        count, newest = self.con.execute(
            "SELECT count(*), coalesce(max(id), 0) FROM events"
        ).fetchone()
        self._events_held, self._newest_event = int(count), int(newest)
        return self._newest_event

    # -- commit ----------------------------------------------------------------

    def due_checkpoint(self, work: Work) -> bool:
        """Inline: whether the commit of `work` should run on the thread and checkpoint
        (the WAL about WAL_AUTOCHECKPOINT_PAGES past its last checkpoint, or
        `checkpoint_every` seconds since the last truncation)."""
        pages = PAGES_PER_COMMIT + PAGES_PER_ROW * (len(work.rows) + len(work.events))
        pages += sum(len(blob) for upserts in work.blobs.values() for _, blob in upserts) // 4096
        self._wal_pages += pages
        if self._wal_pages >= WAL_AUTOCHECKPOINT_PAGES:
            return True
        return time.monotonic() - self._last_checkpoint >= self.checkpoint_every

    def _checkpoint_after_commit(self) -> None:
        """Inline, on the thread (due_checkpoint): truncating when `checkpoint_every`
        is up, else passive as SQLite's own."""
        if time.monotonic() - self._last_checkpoint >= self.checkpoint_every:
            self.checkpoint()
        else:
            with contextlib.suppress(sqlite3.OperationalError):
                self.con.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self._wal_pages = 0

    def commit(self, work: Work) -> int:
        """Write `work` in one transaction; the room left afterwards (bytes)."""
        work.expired = self._transaction([work], work.now)
        if not work.empty:
            self.commits += 1
        if not self.inline and time.monotonic() - self._last_checkpoint >= self.checkpoint_every:
            self.checkpoint()
        return self._room_after(estimate_bytes(work))

    def _transaction(
        self, works: list[Work], now: float, applied_seq: int | None = None
    ) -> list[Any]:
        """`works` written in order in ONE transaction, with the TTL deletions due at
        `now` and the audit cap; `applied_seq`: they hold the commit log up to that
        entry (recorded with them). The keys the TTL deletions removed."""
        con = self.con
        held = self._events_held + sum(len(work.events) for work in works)
        newest = next(
            (int(work.events[-1][0]) for work in reversed(works) if work.events),
            self._newest_event,
        )
        con.execute("BEGIN IMMEDIATE")
        try:
            for work in works:
                self._write(con, work)
            expired = self._delete_expired(con, works, now)
            if applied_seq is not None:
                con.execute(
                    "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                    (commit_log.APPLIED, str(applied_seq)),
                )
            held = self._cap_events(con, held, newest)
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            self._next_expiry = 0.0  # its deletions were rolled back too
            raise
        self._events_held, self._newest_event = held, newest
        return expired

    def _room_after(self, added: int) -> int:
        """room(), measured when it is small or a second old; else the last
        measure less `added` (what a commit may have added: an underestimate)."""
        stale = time.monotonic() - self._room_measured >= ROOM_MEASURE_EVERY
        if stale or self._room < ROOM_MEASURE_BELOW:
            with contextlib.suppress(OSError, sqlite3.Error):  # (after a COMMIT: never fail it)
                return self.room()
        self._room -= added
        return self._room

    def _write(self, con: sqlite3.Connection, work: Work) -> None:
        if work.rows:
            con.executemany(self._upsert_record, work.rows)
        for name, upserts in work.blobs.items():
            table = self.tables.blob_table(name)
            # the compare keeps an unchanged blob (most rewrites) from being written again
            con.executemany(
                f"INSERT INTO {table} (id, data) VALUES (?, ?) ON CONFLICT (id) "
                "DO UPDATE SET data = excluded.data WHERE data IS NOT excluded.data",
                upserts,
            )
        for name, keys in work.blob_deletes.items():
            con.executemany(f"DELETE FROM {self.tables.blob_table(name)} WHERE id = ?", keys)
        if work.events:
            con.executemany(self._insert_event, work.events)
        if work.meta:
            con.executemany("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", work.meta)

    def _delete_expired(self, con: sqlite3.Connection, works: list[Work], now: float) -> list[Any]:
        """Delete the rows whose expire_at <= now, if any can be due; their keys.

        `_next_expiry` is a lower bound of the file's earliest expire_at (the
        earliest after the last deletion, lowered by every row written since),
        so most commits skip the three statements."""
        column = self._expire_column
        if column is None:
            return []
        written = [row[column] for work in works for row in work.rows if row[column] is not None]
        if written:
            self._next_expiry = min(self._next_expiry, min(written))
        if now < self._next_expiry:
            return []
        due = f"SELECT id FROM records WHERE {EXPIRE_FIELD} <= ?"
        expired = [key for (key,) in con.execute(due, (now,))]
        for name in self.tables.records.blobs:
            con.execute(f"DELETE FROM {self.tables.blob_table(name)} WHERE id IN ({due})", (now,))
        con.execute(f"DELETE FROM records WHERE {EXPIRE_FIELD} <= ?", (now,))
        self._next_expiry = self._earliest_expiry(con)
        return expired

    def _earliest_expiry(self, con: sqlite3.Connection) -> float:
        query = f"SELECT min({EXPIRE_FIELD}) FROM records WHERE {EXPIRE_FIELD} IS NOT NULL"
        (earliest,) = con.execute(query).fetchone()
        return math.inf if earliest is None else float(earliest)

    def _cap_events(self, con: sqlite3.Connection, held: int, newest: int) -> int:
        """Keep the newest `events_cap`, trimming once 10 % over (as the in-memory list);
        how many are held afterwards."""
        cap = self.events_cap
        if held <= cap + max(1, cap // 10):
            return held
        con.execute("DELETE FROM events WHERE id <= ?", (newest - cap,))
        return cap

    def room(self) -> int:
        """Bytes the file may still grow by: free pages inside it plus the disk's free space,
        within `max_page_count` and within the process's file-size limit (`ulimit -f`,
        systemd's LimitFSIZE=: past it a write fails as on a full disk)."""
        con = self.con
        pages = int(con.execute("PRAGMA page_count").fetchone()[0])
        free = int(con.execute("PRAGMA freelist_count").fetchone()[0])
        limit = int(con.execute("PRAGMA max_page_count").fetchone()[0])
        reusable = free * self._page_size
        inside = (limit - pages) * self._page_size + reusable
        stats = os.statvfs(self.directory)
        room = min(inside, stats.f_bavail * stats.f_frsize + reusable)
        size_limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if size_limit != resource.RLIM_INFINITY:
            room = min(room, size_limit - pages * self._page_size + reusable)
        self._room, self._room_measured = room, time.monotonic()
        return room

    def checkpoint(self) -> None:
        """Copy the WAL into the file and truncate it (skipped while a reader holds it)."""
        self._last_checkpoint = time.monotonic()
        self._wal_pages = 0
        with contextlib.suppress(sqlite3.OperationalError):  # busy: the next one will
            self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        if self._con is None:
            return
        with contextlib.suppress(sqlite3.Error):  # the log keeps them: the next start applies
            self.apply_all()
        self.log_file.close(remove=self._log_replayed and not self._logged)
        con, self._con = self._con, None
        with contextlib.suppress(sqlite3.Error):
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
