"""Helpers for the durable embedded store's tests: stores on real files in tmp dirs."""

from __future__ import annotations

import dataclasses
import errno
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest

from store.journal import DB_NAME, Journal
from store.journal.log import LOG_NAME
from store.journal.writer import Work, Writer
from store.memory import LocalStore
from store.memory.durable import TABLES
from store.memory.state import State
from store.model import StoreSettings


class FakeClock:
    """A store clock the test moves by hand (TTLs, leases)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def settings(**overrides: Any) -> StoreSettings:
    return dataclasses.replace(StoreSettings(), **overrides)


async def open_store(
    directory: Path,
    store_settings: StoreSettings | None = None,
    clock: Any = None,
    data_sync: str = "normal",
    loaded: bool = True,
    **knobs: Any,
) -> LocalStore:
    """A durable LocalStore on `directory`, opened (sync normal: tests need no fsync);
    `loaded`: once its finished jobs are in too (tests that read the state itself)."""
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    store = LocalStore(
        store_settings or StoreSettings(), data_dir=directory, data_sync=data_sync, **extra, **knobs
    )
    await store.open()
    if loaded:
        await store.engine.fully_loaded()
    return store


def fail_next_commit(journal: Journal[State], monkeypatch: pytest.MonkeyPatch) -> list[Work]:
    """The journal's next commit fails as a disk error would: its write to the commit
    log (under `normal`, inline), else its SQLite transaction. The failed Work, once made."""
    writer = journal.writer
    name = "log" if writer.inline else "commit"
    real = getattr(writer, name)
    failed: list[Work] = []

    def failing(work: Work, *args: Any) -> Any:
        if not failed:
            failed.append(work)
            if writer.inline:
                raise OSError(errno.EIO, "Input/output error")
            raise sqlite3.OperationalError("disk I/O error")
        return real(work, *args)

    monkeypatch.setattr(writer, name, failing)
    return failed


def journal_of(store: LocalStore) -> Journal[State]:
    journal = store.engine.journal
    assert journal is not None
    return journal


def query(directory: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """What a start would find in `directory` now (as a crash would leave it): the
    SQLite file with the commit log applied (under `normal` a commit is in the log
    first), read from a copy so the running store's files stay as they are."""
    with tempfile.TemporaryDirectory(prefix="jobgate-test-view-") as scratch:
        copy = Path(scratch)
        # The log first, then the file through SQLite's backup (one read transaction):
        # copying the file and its WAL byte by byte while the store checkpoints
        # gave a torn copy ("database disk image is malformed", 1 run in 24 of 8
        # at once). Batches logged after the log's copy are not in the view, and
        # any the file holds by then are skipped by the replay: a moment's view.
        if (directory / LOG_NAME).exists():
            shutil.copyfile(directory / LOG_NAME, copy / LOG_NAME)
        if (directory / DB_NAME).exists():
            _backup(directory / DB_NAME, copy / DB_NAME)
        writer = Writer(copy, TABLES, "normal", events_cap=1 << 30)
        writer.open()  # replays the log into the copy
        writer.close()
        return file_query(copy, sql, *args)


def _backup(source: Path, target: Path) -> None:
    live = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    copy = sqlite3.connect(target)
    try:
        live.backup(copy)
    finally:
        copy.close()
        live.close()


def file_query(directory: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """What the SQLite file itself holds (committed), the commit log aside."""
    con = sqlite3.connect(f"file:{directory / DB_NAME}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def count(directory: Path, table: str) -> int:
    return int(query(directory, f"SELECT count(*) FROM {table}")[0][0])
