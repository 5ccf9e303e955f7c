"""Opening a data directory: one process per directory, and the refusals at start."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from store.journal import DB_NAME, SCHEMA_VERSION, DataDirRefused, Journal, Loaded, RowCodec, Tables
from store.memory import LocalStore
from store.model import JobSpec, StoreSettings, SubmitRequest
from tests.launcher import REPO_ROOT
from tests.store.conftest import MODEL, TENANT, submit_one
from tests.store.durable import open_store


async def test_a_second_store_on_a_directory_in_use_is_refused_naming_it_and_the_pid(
    tmp_path: Path,
) -> None:
    first = await open_store(tmp_path)
    try:
        with pytest.raises(DataDirRefused) as refused:
            await open_store(tmp_path)
    finally:
        await first.close()

    assert str(tmp_path) in str(refused.value)
    assert f"pid {os.getpid()}" in str(refused.value)


async def test_a_closed_store_frees_its_directory(tmp_path: Path) -> None:
    await (await open_store(tmp_path)).close()

    second = await open_store(tmp_path)
    await second.close()


_HOLDER = """
import asyncio, sys
from store.memory import LocalStore
from store.model import StoreSettings

async def main():
    store = LocalStore(StoreSettings(), data_dir=sys.argv[1])
    await store.open()
    print("open", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, str(tmp_path), stdout=subprocess.PIPE, cwd=REPO_ROOT
    )
    try:
        assert holder.stdout is not None
        assert await holder.stdout.readline() == b"open\n"
        with pytest.raises(DataDirRefused, match=f"pid {holder.pid}"):
            await open_store(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        await holder.wait()

    store = await open_store(tmp_path)
    await store.close()


async def test_a_data_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not-a-dir"
    path.write_text("x")

    with pytest.raises(DataDirRefused, match="is a file, not a directory"):
        await open_store(path)


async def test_a_missing_data_dir_is_created(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "a" / "b")
    await store.close()

    assert (tmp_path / "a" / "b" / DB_NAME).is_file()


async def _a_directory_with_jobs(directory: Path, jobs: int = 1) -> None:
    store = await open_store(directory)
    for index in range(jobs):
        await submit_one(store, payload=b"x" * 200, key=f"k{index}")
    await store.close()


async def test_a_file_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    await _a_directory_with_jobs(tmp_path)
    with sqlite3.connect(tmp_path / DB_NAME) as con:
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")

    with pytest.raises(DataDirRefused, match="newer jobgate"):
        await open_store(tmp_path)


async def test_a_file_with_a_column_this_version_does_not_know_is_refused(tmp_path: Path) -> None:
    await _a_directory_with_jobs(tmp_path)
    with sqlite3.connect(tmp_path / DB_NAME) as con:
        con.execute("ALTER TABLE records ADD COLUMN from_the_future TEXT")

    with pytest.raises(DataDirRefused, match="from_the_future"):
        await open_store(tmp_path)


async def test_a_garbled_header_is_refused_as_corrupt(tmp_path: Path) -> None:
    await _a_directory_with_jobs(tmp_path)
    with (tmp_path / DB_NAME).open("r+b") as file:
        file.write(b"garbage garbage!")

    with pytest.raises(DataDirRefused, match="corrupt"):
        await open_store(tmp_path)


async def test_a_truncated_file_is_refused_as_corrupt(tmp_path: Path) -> None:
    await _a_directory_with_jobs(tmp_path)
    path = tmp_path / DB_NAME
    os.truncate(path, path.stat().st_size - 100)

    with pytest.raises(DataDirRefused, match="corrupt"):
        await open_store(tmp_path)


async def test_a_garbled_page_of_the_records_is_refused_as_corrupt(tmp_path: Path) -> None:
    await _a_directory_with_jobs(tmp_path, jobs=50)
    path = tmp_path / DB_NAME
    with sqlite3.connect(path) as con:
        (root,) = con.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'records'"
        ).fetchone()
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
    with path.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(os.urandom(page_size))

    with pytest.raises(DataDirRefused, match="corrupt"):
        await open_store(tmp_path)


async def test_a_refused_start_leaves_the_directory_free(tmp_path: Path) -> None:
    await _a_directory_with_jobs(tmp_path)
    with sqlite3.connect(tmp_path / DB_NAME) as con:
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(DataDirRefused):
        await open_store(tmp_path)
    with sqlite3.connect(tmp_path / DB_NAME) as con:
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    store = await open_store(tmp_path)
    await store.close()


async def test_an_empty_data_dir_opens_an_empty_store(tmp_path: Path) -> None:
    store = LocalStore(StoreSettings(), data_dir=tmp_path)
    await store.open()
    try:
        assert await store.queue_depths() == {}
        await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))
    finally:
        await store.close()


# -- a field added later gets its column, and old rows its default -------------------


@dataclass
class _Event:
    id: str
    what: str = ""


@dataclass
class _RowV1:
    id: str
    name: str = ""


@dataclass
class _RowV2:
    id: str
    name: str = ""
    tags: list[str] = field(default_factory=lambda: ["new"])
    blob: bytes = b""


def _tables(row: type[Any]) -> Tables:
    events = RowCodec(_Event, "id", overrides={"id": ("INTEGER", int, str)})
    return Tables(records=RowCodec(row, "id"), events=events)


def _loaded(loaded: Loaded) -> Loaded:
    return loaded


async def test_a_new_field_needs_no_code_old_rows_get_its_default(tmp_path: Path) -> None:
    old: Journal[Loaded] = Journal(tmp_path, _tables(_RowV1), sync="normal")
    records: dict[str, Any] = (await old.open(_loaded)).records
    old.attach(records, dict)
    records["a"] = _RowV1("a", "first")
    old.mark("a")
    await old.settled()
    await old.close()

    new: Journal[Loaded] = Journal(tmp_path, _tables(_RowV2), sync="normal")
    loaded = await new.open(_loaded)
    await new.close()

    assert loaded.records == {"a": _RowV2("a", "first", ["new"], b"")}
