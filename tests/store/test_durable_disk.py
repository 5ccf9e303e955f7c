"""The data directory's size: a full disk, TTL deletion, the audit cap, checkpoints."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from store import QueueFull, StoreUnavailable
from store.journal import writer as writer_module
from store.journal.writer import WAL_AUTOCHECKPOINT_PAGES, Work, Writer
from store.memory import LocalStore
from store.memory.durable import TABLES
from store.memory.record import Record
from store.model import JobKind, JobSpec, JobStatus, Priority, ResultReport, SubmitRequest
from tests.helpers import assert_eventually
from tests.store.conftest import MODEL, TENANT, claim_one, spec, submit_group, submit_one
from tests.store.durable import FakeClock, count, journal_of, open_store, query, settings

FULL_AT_PAGES = 2000  # an 8 MiB "disk" (PRAGMA max_page_count)
RESERVE = 1024 * 1024
ROUNDS_AFTER_FULL = 1000


async def _fill_until_refused(store: LocalStore) -> int:
    """Submit 16 KiB jobs until Submit answers QueueFull; how many went in."""
    for made in range(10_000):
        try:
            await submit_one(store, payload=b"f" * 16384)
        except QueueFull:
            return made
    raise AssertionError("the disk never filled")


async def test_a_full_disk_refuses_submit_and_lets_updates_through(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_pages=FULL_AT_PAGES, reserve=RESERVE)
    try:
        running = [await submit_one(store, model="run") for _ in range(ROUNDS_AFTER_FULL)]
        waiting = [await submit_one(store, model="wait") for _ in range(ROUNDS_AFTER_FULL)]
        leases: dict[str, str] = {}
        while len(leases) < len(running):
            for item in await store.claim("w1", ["run"], max_jobs=64):
                leases[item.job.id] = item.lease_id
        assert await _fill_until_refused(store) > 0
        commits = journal_of(store).commits

        for job, other in zip(running, waiting, strict=True):
            await store.heartbeat(job.id, leases[job.id], 0.9, "last")
            report = ResultReport(JobStatus.COMPLETED, b"r" * 64)
            assert (await store.record_result(job.id, leases[job.id], report)).applied
            assert (await store.cancel(TENANT, other.id)).cancelled

        assert journal_of(store).commits - commits >= 2 * ROUNDS_AFTER_FULL
        with pytest.raises(QueueFull):
            await submit_one(store)
    finally:
        await store.close()


async def test_a_refused_submit_writes_nothing(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_pages=FULL_AT_PAGES, reserve=RESERVE)
    try:
        made = await _fill_until_refused(store)
        batch = [SubmitRequest(TENANT, JobSpec(MODEL, b"b" * 16384)) for _ in range(2)]
        with pytest.raises(QueueFull):
            await store.submit_batch(batch)

        assert count(tmp_path, "records") == made
        assert sum((await store.queue_depths()).values()) == made
    finally:
        await store.close()


async def test_a_commit_the_disk_cannot_hold_fails_and_memory_returns_to_the_file(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path, max_pages=200, reserve=0)
    try:
        job = await submit_one(store)
        claimed = await claim_one(store)
        too_big = ResultReport(JobStatus.COMPLETED, b"x" * (2 * 1024 * 1024))

        with pytest.raises(StoreUnavailable):
            await store.record_result(job.id, claimed.lease_id, too_big)

        async def reloaded() -> bool:
            try:
                return (await store.get(TENANT, job.id)).status is JobStatus.PROCESSING
            except StoreUnavailable:
                return False

        await assert_eventually(reloaded, message="memory was not rebuilt from the file")
        assert query(tmp_path, "SELECT status FROM records") == [("processing",)]
        small = ResultReport(JobStatus.COMPLETED, b"fits")
        assert (await store.record_result(job.id, claimed.lease_id, small)).applied
    finally:
        await store.close()


async def test_a_terminal_job_leaves_the_file_at_its_ttl(tmp_path: Path) -> None:
    clock = FakeClock()
    store = await open_store(
        tmp_path, settings(result_ttl=timedelta(seconds=60)), clock, housekeeping_every=3600
    )
    try:
        job = await submit_one(store, payload=b"gone")
        claimed = await claim_one(store)
        await store.record_result(job.id, claimed.lease_id, ResultReport(JobStatus.COMPLETED, b"r"))
        clock.advance(61)

        await submit_one(store)  # any commit deletes what fell due

        assert query(tmp_path, "SELECT id FROM records WHERE id = ?", job.id) == []
        assert count(tmp_path, "blob_payload") == 1
        assert count(tmp_path, "blob_result") == 0
    finally:
        await store.close()


async def test_an_idle_store_still_deletes_what_fell_due(tmp_path: Path) -> None:
    clock = FakeClock()
    store = await open_store(
        tmp_path, settings(result_ttl=timedelta(seconds=60)), clock, housekeeping_every=0.05
    )
    try:
        job = await submit_one(store)
        await store.cancel(TENANT, job.id)
        clock.advance(61)

        async def deleted() -> bool:
            return count(tmp_path, "records") == 0

        await assert_eventually(deleted, message="the expired job stayed in the file")
    finally:
        await store.close()


async def test_a_groups_children_leave_the_file_with_it(tmp_path: Path) -> None:
    clock = FakeClock()
    store = await open_store(
        tmp_path, settings(result_ttl=timedelta(seconds=60)), clock, housekeeping_every=3600
    )
    try:
        group = await submit_group(store, 3)
        await store.cancel(TENANT, group.id)
        clock.advance(61)

        await submit_one(store)

        assert count(tmp_path, "records") == 1
    finally:
        await store.close()


async def test_the_audit_trail_in_the_file_is_capped(tmp_path: Path) -> None:
    store = await open_store(tmp_path, settings(events_max_length=10))
    try:
        for _ in range(30):
            await submit_one(store)
        await journal_of(store).flush()  # (under normal, SQLite gets the log's batches here)

        assert count(tmp_path, "events") <= 11
        assert query(tmp_path, "SELECT max(id) FROM events") == [(30,)]
    finally:
        await store.close()


@pytest.mark.parametrize("sync", ["normal", "full"])
async def test_the_wal_is_checkpointed_and_truncated(tmp_path: Path, sync: str) -> None:
    store = await open_store(tmp_path, data_sync=sync, checkpoint_every=0)
    try:
        await submit_one(store, payload=b"p" * 100_000)
        await journal_of(store).flush()  # (under normal, SQLite gets the log's batches here)

        assert (tmp_path / "jobgate.db-wal").stat().st_size == 0
        settings = await journal_of(store).connection_settings()
        assert settings["journal_size_limit"] > 0
        # normal applies on the loop: the journal checkpoints (on its thread), not SQLite
        assert (settings["wal_autocheckpoint"] > 0) == (sync == "full")
    finally:
        await store.close()


async def _round(store: LocalStore, clock: FakeClock, jobs: int) -> None:
    """Submit, run and complete `jobs` jobs, then let their TTL pass."""
    for _ in range(jobs):
        await submit_one(store, payload=b"p" * 1024)
    for _ in range(jobs):
        claimed = await claim_one(store)
        report = ResultReport(JobStatus.COMPLETED, b"r" * 256)
        await store.record_result(claimed.job.id, claimed.lease_id, report)
    clock.advance(61)
    await store.recover()
    other = await submit_one(store, model="other")  # a commit, which deletes what fell due
    await store.cancel(TENANT, other.id)
    await journal_of(store).flush()  # (under normal, SQLite gets the log's batches here)


async def test_the_file_stops_growing_when_jobs_come_and_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the log's batches reach SQLite by count and at each round's flush, not by the clock:
    # the same transactions every round, so the pages freed are the pages used again
    monkeypatch.setattr(writer_module, "APPLY_EVERY", 3600.0)
    clock = FakeClock()
    store = await open_store(
        tmp_path,
        settings(result_ttl=timedelta(seconds=60), events_max_length=10),
        clock,
        checkpoint_every=0,
        housekeeping_every=3600,
    )
    try:
        await _round(store, clock, 300)
        first = (tmp_path / "jobgate.db").stat().st_size
        for _ in range(3):
            await _round(store, clock, 300)

        assert (tmp_path / "jobgate.db").stat().st_size <= first
    finally:
        await store.close()


# Steady traffic: terminal jobs live WAVE_TTL seconds of the fake clock,
# which moves one second per batch, so about WAVE_TTL batches of jobs are in
# the file at any time and the older ones have left it. The journal's own
# knobs are production's, except the timed WAL truncation, which runs every
# WAVE_CHECKPOINT real seconds instead of 30 (as the TTL is short) so that
# each wave is measured with its WAL truncated.
WAVE_JOBS = 3000
WAVE_BATCH = 100
WAVE_TTL = 10
WAVE_EVENTS_CAP = 500
WAVE_CHECKPOINT = 1.0
#: Where freed pages are reused differs a little from wave to wave.
GROWTH_SLACK = 64 * 1024
#: Between checkpoints the WAL holds SQLite's automatic checkpoint interval
#: plus the commit that crossed it; unchecked, one wave writes over 20 MB.
WAL_BOUND = 2 * WAL_AUTOCHECKPOINT_PAGES * (4096 + 24)


def directory_bytes(directory: Path) -> int:
    """Everything the store keeps in its directory (db, -wal, -shm, the lock)."""
    return sum(path.stat().st_size for path in directory.iterdir() if path.is_file())


def wal_bytes(directory: Path) -> int:
    wal = directory / "jobgate.db-wal"
    return wal.stat().st_size if wal.exists() else 0


async def _run_batch(store: LocalStore) -> None:
    """Submit WAVE_BATCH jobs at once, claim them 64 at a time, complete them concurrently."""
    requests = [SubmitRequest(TENANT, spec(payload=b"p" * 1024)) for _ in range(WAVE_BATCH)]
    await store.submit_batch(requests)
    done = 0
    while done < WAVE_BATCH:
        claimed = await store.claim("w1", [MODEL], max_jobs=64)
        report = ResultReport(JobStatus.COMPLETED, b"r" * 256)
        await asyncio.gather(
            *(store.record_result(item.job.id, item.lease_id, report) for item in claimed)
        )
        done += len(claimed)


async def _wave(store: LocalStore, clock: FakeClock, directory: Path) -> int:
    """WAVE_JOBS jobs through the store, then their TTL; the directory's size after it
    (once the WAL is truncated).

    Checks on the way that the files stay bounded: records and payloads by
    the jobs the TTL still keeps, events by the audit cap (trimmed once 10 %
    over), the WAL by its checkpoints.
    """
    kept = (WAVE_TTL + 1) * WAVE_BATCH
    peak = 0
    for _ in range(WAVE_JOBS // WAVE_BATCH):
        await _run_batch(store)
        clock.advance(1)
        await store.recover()  # as serve's recovery loop does: expired jobs leave memory
        await journal_of(store).flush()  # (under normal, SQLite gets the log's batches here)
        records = count(directory, "records")
        assert records <= kept and count(directory, "blob_payload") <= kept
        assert count(directory, "events") <= WAVE_EVENTS_CAP + WAVE_EVENTS_CAP // 10
        assert wal_bytes(directory) <= WAL_BOUND
        peak = max(peak, records)
    assert peak > WAVE_BATCH  # jobs stayed until their TTL, then left
    clock.advance(WAVE_TTL + 1)
    await store.recover()

    async def emptied_and_checkpointed() -> bool:  # by the next housekeeping commits
        left = count(directory, "records") + count(directory, "blob_result")
        return left == 0 and wal_bytes(directory) == 0

    await assert_eventually(
        emptied_and_checkpointed, message="terminal jobs or the WAL stayed past their time"
    )
    return directory_bytes(directory)


async def test_the_directory_stops_growing_under_steady_traffic(tmp_path: Path) -> None:
    clock = FakeClock()
    store = await open_store(
        tmp_path,
        settings(result_ttl=timedelta(seconds=WAVE_TTL), events_max_length=WAVE_EVENTS_CAP),
        clock,
        checkpoint_every=WAVE_CHECKPOINT,
    )
    try:
        first = await _wave(store, clock, tmp_path)
        second = await _wave(store, clock, tmp_path)

        assert second <= first + GROWTH_SLACK, (first, second)
        assert count(tmp_path, "blob_payload") == 0
    finally:
        await store.close()


def _finished(job_id: str, expire_at: float) -> Record:
    return Record(job_id, TENANT, JobKind.SINGLE, JobStatus.COMPLETED, Priority.BATCH, "m",
                  1.0, 1.0, expire_at=expire_at)  # fmt: skip


def test_a_row_expiring_before_every_other_is_still_deleted_when_due(tmp_path: Path) -> None:
    # commits skip the TTL deletes until the earliest expiry the file may
    # hold; a row written later with an earlier one must lower that bound
    writer = Writer(tmp_path, TABLES, "normal", events_cap=100)
    writer.open()
    try:
        writer.commit(Work(rows=[TABLES.records.row(_finished("late", 1000.0))], now=100.0))
        writer.commit(Work(rows=[TABLES.records.row(_finished("early", 500.0))], now=200.0))
        writer.commit(Work(now=600.0))

        assert query(tmp_path, "SELECT id FROM records") == [("late",)]
    finally:
        writer.close()
