"""Helpers for the durable embedded store's tests: stores on real files in tmp dirs."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

from store.journal import DB_NAME, Journal
from store.memory import LocalStore
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


def journal_of(store: LocalStore) -> Journal[State]:
    journal = store.engine.journal
    assert journal is not None
    return journal


def query(directory: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """What the file holds (committed), through a read-only connection of the test's own."""
    con = sqlite3.connect(f"file:{directory / DB_NAME}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def count(directory: Path, table: str) -> int:
    return int(query(directory, f"SELECT count(*) FROM {table}")[0][0])
