"""The commit log in front of SQLite under `--data-sync normal` (store/journal/log.py)."""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from store import StoreUnavailable
from store.journal import DB_NAME, DataDirRefused
from store.journal import writer as writer_module
from store.journal.log import APPLIED, LOG_NAME, CommitLog, LogDamaged, encode, entries
from store.journal.writer import APPLY_EVERY, Work, Writer
from store.memory import LocalStore
from store.memory import engine as engine_module
from store.memory.durable import TABLES
from store.model import JobStatus
from tests.helpers import assert_eventually
from tests.store.conftest import MODEL, TENANT, claim_one, submit_one
from tests.store.durable import file_query, journal_of, open_store, query


@pytest.fixture
def held_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The logged batches wait for a flush or a close (no timed apply)."""
    monkeypatch.setattr(writer_module, "APPLY_EVERY", 3600.0)


def _crash_copy(live: Path, crashed: Path) -> Path:
    """The directory as a kill -9 now would leave it (the running store's lock aside)."""
    shutil.copytree(live, crashed, ignore=shutil.ignore_patterns("lock"))
    return crashed


async def _crashed_after_a_submit(tmp_path: Path, payload: bytes = b"x") -> tuple[Path, str]:
    """A directory as a kill -9 right after one answered Submit leaves it; the job's id."""
    live = await open_store(tmp_path / "live", housekeeping_every=3600)
    try:
        job = await submit_one(live, payload=payload)
        return _crash_copy(tmp_path / "live", tmp_path / "crashed"), job.id
    finally:
        await live.close()


# -- the format ------------------------------------------------------------------


def test_entries_read_back_in_order() -> None:
    data = encode(1, ("a", [1, 2.5], {"k": b"v"}, None)) + encode(2, ("b",))

    assert list(entries(data, after=0)) == [(1, ("a", [1, 2.5], {"k": b"v"}, None)), (2, ("b",))]


def test_entries_sqlite_holds_already_are_skipped() -> None:
    data = encode(1, "one") + encode(2, "two") + encode(3, "three")

    assert [seq for seq, _ in entries(data, after=2)] == [3]


def test_a_cut_last_entry_is_dropped() -> None:
    data = encode(1, "kept") + encode(2, "x" * 100)[:-1]

    assert list(entries(data, after=0)) == [(1, "kept")]


def test_a_damaged_entry_ends_the_replay() -> None:
    second = bytearray(encode(2, "damaged"))
    second[-1] ^= 0xFF
    data = encode(1, "kept") + bytes(second) + encode(3, "after")

    assert list(entries(data, after=0)) == [(1, "kept")]


def test_a_log_missing_the_entry_after_what_sqlite_holds_applies_nothing() -> None:
    data = encode(4, "after a lost one")

    assert list(entries(data, after=2)) == []


def test_a_gap_in_the_sequence_ends_the_replay() -> None:
    data = encode(1, "kept") + encode(3, "not next")

    assert list(entries(data, after=0)) == [(1, "kept")]


def test_a_whole_entry_naming_a_class_is_refused_not_unpickled() -> None:
    body = pickle.dumps(Path("/"), protocol=5)  # a class the unpickler would have to import
    forged = encode(1, "kept") + _entry(2, body)

    with pytest.raises(LogDamaged, match="entry 2"):
        list(entries(forged, after=0))


def test_a_start_on_a_log_with_an_unreadable_whole_entry_is_refused(tmp_path: Path) -> None:
    (tmp_path / LOG_NAME).write_bytes(_entry(1, pickle.dumps(Path("/"), protocol=5)))

    with pytest.raises(DataDirRefused, match="cannot be read"):
        Writer(tmp_path, TABLES, "normal", events_cap=100, inline=True).open()
    assert (tmp_path / LOG_NAME).stat().st_size > 0


def test_a_write_cut_short_is_cut_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = CommitLog(tmp_path)
    log.open()
    log.append(encode(1, "whole"))
    real_write = os.write

    def cut_short(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", cut_short)
    with pytest.raises(OSError):
        log.append(encode(2, "cut"))
    monkeypatch.undo()
    log.append(encode(2, "next"))
    log.close(remove=False)

    assert [batch for _, batch in entries(log.read(), after=0)] == ["whole", "next"]


def _entry(seq: int, body: bytes) -> bytes:
    return struct.pack(">IIQ", len(body), zlib.crc32(body), seq) + body


# -- the writer --------------------------------------------------------------------


def test_a_start_applies_only_the_entries_past_what_sqlite_holds(tmp_path: Path) -> None:
    writer = Writer(tmp_path, TABLES, "normal", events_cap=100, inline=True)
    writer.open()
    writer.close()
    meta = [(APPLIED, "1")]
    log = encode(1, Work(meta=[("applied-twice", "1")]).batch())
    log += encode(2, Work(meta=[("replayed", "2")]).batch())
    file_writer = Writer(tmp_path, TABLES, "normal", events_cap=100)
    file_writer.open()
    file_writer.commit(Work(meta=meta))
    file_writer.close()
    (tmp_path / LOG_NAME).write_bytes(log)

    Writer(tmp_path, TABLES, "normal", events_cap=100).open()

    names = {name for (name,) in file_query(tmp_path, "SELECT name FROM meta")}
    assert "replayed" in names and "applied-twice" not in names
    assert file_query(tmp_path, "SELECT value FROM meta WHERE name = ?", APPLIED) == [("2",)]


def test_a_delete_and_then_an_upsert_of_one_blob_keep_their_order_in_one_apply(
    tmp_path: Path,
) -> None:
    writer = Writer(tmp_path, TABLES, "normal", events_cap=100, inline=True)
    writer.open()
    try:
        writer.log(Work(blob_deletes={"result": [("job-1",)]}))  # (a sealed empty result)
        writer.log(Work(blobs={"result": [("job-1", b"made")]}))  # then the job's result

        writer.apply(writer.to_apply(now=0.0))
    finally:
        writer.close()

    assert file_query(tmp_path, "SELECT data FROM blob_result WHERE id = 'job-1'") == [(b"made",)]


# -- the store ---------------------------------------------------------------------


async def _serving_again(store: LocalStore) -> None:
    async def serving() -> bool:
        try:
            return await store.queue_depths() is not None
        except StoreUnavailable:
            return False

    await assert_eventually(serving, message="the store never reloaded")


async def test_an_apply_that_fails_is_retried_by_the_reload_until_it_passes(
    tmp_path: Path, held_log: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "RELOAD_RETRY", 0.01)
    store = await open_store(tmp_path, housekeeping_every=3600)
    try:
        writer = journal_of(store).writer
        real_apply, failures = writer.apply, [1, 2, 3]

        def failing_apply(summary: Work, *args: Any) -> int:
            if failures:
                failures.pop()
                raise sqlite3.OperationalError("disk I/O error")
            return real_apply(summary, *args)

        monkeypatch.setattr(writer, "apply", failing_apply)
        job = await submit_one(store)  # logged: answered
        await journal_of(store).flush()  # its apply fails, and the reload's twice

        await _serving_again(store)
        assert failures == []
        assert file_query(tmp_path, "SELECT id FROM records") == [(job.id,)]
        assert (await store.get(TENANT, job.id)).status is JobStatus.QUEUED
    finally:
        await store.close()


async def test_an_apply_whose_room_measure_fails_is_not_applied_twice(
    tmp_path: Path, held_log: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(tmp_path, housekeeping_every=3600)
    try:
        writer = journal_of(store).writer
        real_room_after, failures = writer._room_after, [1]

        def failing_room_after(added: int) -> int:
            if failures:
                failures.pop()
                raise OSError(errno.EIO, "Input/output error")
            return real_room_after(added)

        monkeypatch.setattr(writer, "_room_after", failing_room_after)
        job = await submit_one(store)
        await journal_of(store).flush()  # committed, then the measure fails: a reload

        await _serving_again(store)
        assert file_query(tmp_path, "SELECT count(*) FROM events") == [(1,)]
        assert (await store.get(TENANT, job.id)).status is JobStatus.QUEUED
    finally:
        await store.close()


async def test_an_answered_submit_is_in_the_log_before_sqlite_has_it(
    tmp_path: Path, held_log: None
) -> None:
    store = await open_store(tmp_path, housekeeping_every=3600)
    try:
        job = await submit_one(store)

        assert file_query(tmp_path, "SELECT id FROM records WHERE id = ?", job.id) == []
        assert (tmp_path / LOG_NAME).stat().st_size > 0
        assert query(tmp_path, "SELECT status FROM records WHERE id = ?", job.id) == [("queued",)]
    finally:
        await store.close()


async def test_a_crash_before_the_apply_loses_no_answered_transition(
    tmp_path: Path, held_log: None
) -> None:
    live = await open_store(tmp_path / "live", housekeeping_every=3600)
    try:
        first = await submit_one(live)
        await journal_of(live).flush()  # the first job in SQLite, the rest in the log only
        second = await submit_one(live)
        claimed = await claim_one(live)
        crashed = _crash_copy(tmp_path / "live", tmp_path / "crashed")
    finally:
        await live.close()

    store = await open_store(crashed)
    try:
        assert (await store.get(TENANT, second.id)).status is JobStatus.QUEUED
        assert (await store.get(TENANT, first.id)).status is JobStatus.PROCESSING
        assert (await store.get(TENANT, first.id)).attempts == claimed.job.attempts
    finally:
        await store.close()


async def test_the_log_reaches_sqlite_within_the_apply_interval(tmp_path: Path) -> None:
    store = await open_store(tmp_path, housekeeping_every=3600)
    try:
        job = await submit_one(store)

        async def applied() -> bool:
            return file_query(tmp_path, "SELECT id FROM records WHERE id = ?", job.id) != []

        await assert_eventually(applied, timeout=50 * APPLY_EVERY, message="never applied")
        assert (tmp_path / LOG_NAME).stat().st_size == 0
    finally:
        await store.close()


async def test_a_batch_too_large_for_the_log_goes_to_sqlite_with_the_log_before_its_answer(
    tmp_path: Path, held_log: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "APPLY_BYTES", 4096)
    store = await open_store(tmp_path, housekeeping_every=3600)
    try:
        small = await submit_one(store, payload=b"s")
        large = await submit_one(store, payload=b"L" * 8192)

        found = {job_id for (job_id,) in file_query(tmp_path, "SELECT id FROM records")}
        assert found == {small.id, large.id}
        assert (tmp_path / LOG_NAME).stat().st_size == 0
    finally:
        await store.close()


async def test_a_large_batch_that_fails_fails_alone_and_the_logged_ones_reach_sqlite(
    tmp_path: Path, held_log: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "APPLY_BYTES", 4096)
    monkeypatch.setattr(engine_module, "RELOAD_RETRY", 0.01)
    store = await open_store(tmp_path, housekeeping_every=3600)
    try:
        writer = journal_of(store).writer
        real_apply, failures = writer.apply, [1]

        def failing_apply(summary: Work, *args: Any) -> int:
            if failures:
                failures.pop()
                raise sqlite3.OperationalError("database or disk is full")
            return real_apply(summary, *args)

        monkeypatch.setattr(writer, "apply", failing_apply)
        logged = await submit_one(store, payload=b"s")  # answered from the log
        with pytest.raises(StoreUnavailable):
            await submit_one(store, payload=b"L" * 8192)  # too large to log: its commit fails

        await _serving_again(store)
        assert file_query(tmp_path, "SELECT id FROM records") == [(logged.id,)]
        assert sum((await store.queue_depths()).values()) == 1  # memory went back to the file
        assert (await store.get(TENANT, logged.id)).status is JobStatus.QUEUED
    finally:
        await store.close()


async def test_a_clean_stop_leaves_the_sqlite_file_alone(tmp_path: Path, held_log: None) -> None:
    store = await open_store(tmp_path, housekeeping_every=3600)
    job = await submit_one(store)
    await store.close()

    assert not (tmp_path / LOG_NAME).exists()
    assert file_query(tmp_path, "SELECT status FROM records WHERE id = ?", job.id) == [("queued",)]


async def test_a_start_under_full_applies_the_log_a_crash_under_normal_left(
    tmp_path: Path, held_log: None
) -> None:
    crashed, job_id = await _crashed_after_a_submit(tmp_path)

    store = await open_store(crashed, data_sync="full")
    try:
        assert (await store.get(TENANT, job_id)).model == MODEL
        assert not (crashed / LOG_NAME).exists()
    finally:
        await store.close()


async def test_a_log_that_cannot_be_applied_stops_the_start_and_is_kept(
    tmp_path: Path, held_log: None
) -> None:
    crashed, _ = await _crashed_after_a_submit(tmp_path, payload=b"p" * 300_000)
    pages = file_query(crashed, "PRAGMA page_count")[0][0]

    with pytest.raises(DataDirRefused, match="free space on the disk"):
        await open_store(crashed, max_pages=pages)

    assert (crashed / LOG_NAME).stat().st_size > 0
    assert (crashed / DB_NAME).exists()
