"""Group commit: answers wait for their commit, concurrent calls share one, failures are loud."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from store import StoreUnavailable
from store.journal import Journal
from store.journal.writer import Work
from store.memory import LocalStore
from store.memory.state import State
from store.model import JobStatus, ResultReport
from tests.helpers import assert_eventually
from tests.store.conftest import MODEL, TENANT, claim_one, complete, submit_one
from tests.store.durable import count, fail_next_commit, journal_of, open_store, query

CONCURRENT = 200


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LocalStore]:
    opened = await open_store(tmp_path, housekeeping_every=3600)
    yield opened
    await opened.close()


@pytest.fixture
async def threaded(tmp_path: Path) -> AsyncIterator[LocalStore]:
    """Every commit on the writer thread, as under `full` (under `normal` commits run
    on the loop, and none can be held while other calls go on)."""
    opened = await open_store(tmp_path, housekeeping_every=3600, inline=False)
    yield opened
    await opened.close()


async def test_a_submit_is_in_the_file_when_it_answers(store: LocalStore, tmp_path: Path) -> None:
    job = await submit_one(store, payload=b"kept")

    assert query(tmp_path, "SELECT status FROM records WHERE id = ?", job.id) == [("queued",)]
    assert query(tmp_path, "SELECT data FROM blob_payload WHERE id = ?", job.id) == [(b"kept",)]
    assert query(tmp_path, "SELECT job_id FROM events") == [(job.id,)]


async def test_concurrent_submits_share_commits(store: LocalStore) -> None:
    journal = journal_of(store)
    before = journal.commits

    await asyncio.gather(*(submit_one(store) for _ in range(CONCURRENT)))

    assert journal.commits - before <= CONCURRENT // 20


async def test_sequential_submits_commit_one_by_one(store: LocalStore) -> None:
    journal = journal_of(store)
    before = journal.commits

    for _ in range(5):
        await submit_one(store)

    assert journal.commits - before == 5


@pytest.mark.parametrize("sync", ["normal", "full"])
async def test_a_submit_and_the_waiting_claim_it_wakes_share_one_commit(
    tmp_path: Path, sync: str
) -> None:
    store = await open_store(tmp_path, data_sync=sync, housekeeping_every=3600)
    try:
        journal = journal_of(store)
        claim = asyncio.create_task(store.claim("w1", [MODEL], wait=timedelta(seconds=30)))

        async def waiting() -> bool:
            return store.waiting_claims(MODEL) == 1

        await assert_eventually(waiting, message="the claim never waited")
        before = journal.commits
        job = await submit_one(store)
        claimed = await claim

        assert [item.job.id for item in claimed] == [job.id]
        assert journal.commits - before == 1
        assert query(tmp_path, "SELECT status FROM records WHERE id = ?", job.id) == [
            ("processing",)
        ]
    finally:
        await store.close()


async def test_a_report_and_claim_told_not_to_settle_leaves_its_results_to_the_next_answer(
    store: LocalStore, tmp_path: Path
) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    journal = journal_of(store)
    before = journal.commits
    report = ResultReport(JobStatus.COMPLETED, b"answer")

    reported = await store.report_and_claim(
        "w1", [MODEL], [(job.id, claimed.lease_id, report)], 1, settle=False
    )

    assert reported.claimed == []
    assert journal.commits == before
    assert query(tmp_path, "SELECT status FROM records WHERE id = ?", job.id) == [("processing",)]
    await store.settled()
    assert journal.commits - before == 1
    assert query(tmp_path, "SELECT status FROM records WHERE id = ?", job.id) == [("completed",)]


async def test_a_report_and_claim_that_claims_settles_though_told_not_to(
    store: LocalStore, tmp_path: Path
) -> None:
    first, second = await submit_one(store), await submit_one(store)
    claimed = await claim_one(store)
    report = ResultReport(JobStatus.COMPLETED, b"answer")

    reported = await store.report_and_claim(
        "w1", [MODEL], [(first.id, claimed.lease_id, report)], 1, settle=False
    )

    assert [item.job.id for item in reported.claimed] == [second.id]
    assert query(tmp_path, "SELECT status FROM records WHERE id = ?", second.id) == [
        ("processing",)
    ]


@pytest.mark.parametrize(("sync", "level"), [("full", 2), ("normal", 1)])
async def test_data_sync_sets_sqlites_synchronous(tmp_path: Path, sync: str, level: int) -> None:
    store = await open_store(tmp_path, data_sync=sync)
    try:
        settings = await journal_of(store).connection_settings()
    finally:
        await store.close()

    assert settings["journal_mode"] == "wal"
    assert settings["synchronous"] == level


async def test_a_heartbeat_answers_before_its_commit_and_is_committed_soon_after(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path, housekeeping_every=3600, lazy_delay=0.05)
    try:
        job = await submit_one(store)
        claimed = await claim_one(store)
        commits = journal_of(store).commits

        await store.heartbeat(job.id, claimed.lease_id, 0.5, "halfway")

        assert journal_of(store).commits == commits

        async def persisted() -> bool:
            rows = query(tmp_path, "SELECT progress, stage FROM records WHERE id = ?", job.id)
            return rows == [(0.5, "halfway")]

        await assert_eventually(persisted, message="the heartbeat never reached the file")
    finally:
        await store.close()


class _HeldWriter:
    """Holds the writer thread inside its next commit until released."""

    def __init__(self, journal: Journal[State], monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real: Callable[[Work], int] = journal.writer.commit

        def held(work: Work) -> int:
            self.entered.set()
            self.release.wait(timeout=30)
            return real(work)

        monkeypatch.setattr(journal.writer, "commit", held)

    async def wait_entered(self) -> None:
        async def entered() -> bool:
            return self.entered.is_set()

        await assert_eventually(entered, message="the writer never started a commit")


async def _yield_to_the_loop() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_read_waits_for_the_commit_of_what_it_reads(
    threaded: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await submit_one(threaded)
    writer = _HeldWriter(journal_of(threaded), monkeypatch)
    cancel = asyncio.create_task(threaded.cancel(TENANT, job.id))
    await writer.wait_entered()

    get = asyncio.create_task(threaded.get(TENANT, job.id))
    await _yield_to_the_loop()
    assert not get.done() and not cancel.done()
    writer.release.set()

    assert (await get).status is JobStatus.CANCELLED
    assert (await cancel).cancelled


async def test_a_read_with_nothing_pending_answers_at_once(
    threaded: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await submit_one(threaded)
    _HeldWriter(journal_of(threaded), monkeypatch)  # any commit would now hang

    assert (await threaded.get(TENANT, job.id)).status is JobStatus.QUEUED


async def test_calls_made_during_a_commit_share_the_next_one(
    threaded: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = journal_of(threaded)
    writer = _HeldWriter(journal, monkeypatch)
    first = asyncio.create_task(submit_one(threaded))
    await writer.wait_entered()
    before = journal.commits

    rest = asyncio.gather(*(submit_one(threaded) for _ in range(50)))
    await _yield_to_the_loop()
    writer.release.set()
    await first
    await rest

    assert journal.commits - before == 2  # the held one, then one for all fifty


@pytest.mark.parametrize("inline", [True, False])
async def test_a_failed_commit_fails_its_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline: bool
) -> None:
    store = await open_store(tmp_path, housekeeping_every=3600, inline=inline)
    try:
        fail_next_commit(journal_of(store), monkeypatch)

        with pytest.raises(StoreUnavailable, match="could not be written"):
            await submit_one(store)
    finally:
        await store.close()


async def test_after_a_failed_commit_memory_is_rebuilt_from_the_file(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kept = await submit_one(store)
    fail_next_commit(journal_of(store), monkeypatch)
    with pytest.raises(StoreUnavailable):
        await submit_one(store)

    async def serving_again() -> bool:
        try:
            return await store.queue_depths() is not None
        except StoreUnavailable:
            return False

    await assert_eventually(serving_again, message="the store never reloaded")
    assert sum((await store.queue_depths()).values()) == 1
    assert (await store.get(TENANT, kept.id)).status is JobStatus.QUEUED
    assert count(tmp_path, "records") == 1
    assert (await claim_one(store)).job.id == kept.id  # and transitions commit again


async def test_a_claim_whose_caller_leaves_during_its_commit_gives_the_job_back(
    threaded: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await submit_one(threaded)
    writer = _HeldWriter(journal_of(threaded), monkeypatch)
    claim = asyncio.create_task(threaded.claim("w1", [job.model]))
    await writer.wait_entered()

    claim.cancel()
    writer.release.set()
    with pytest.raises(asyncio.CancelledError):
        await claim

    async def queued_again() -> Any:
        return (await threaded.get(TENANT, job.id)).status is JobStatus.QUEUED

    await assert_eventually(queued_again, message="the abandoned claim kept its lease")


async def test_a_claim_does_not_write_its_jobs_payload_again(
    store: LocalStore, tmp_path: Path
) -> None:
    job = await submit_one(store, payload=b"kept")
    await journal_of(store).flush()
    statements: list[str] = []
    journal_of(store).writer.con.set_trace_callback(statements.append)

    await claim_one(store)
    await journal_of(store).flush()  # (under normal, SQLite gets the log's batches here)

    assert any("records" in statement for statement in statements)
    assert not any("blob_payload" in statement for statement in statements)
    assert query(tmp_path, "SELECT data FROM blob_payload WHERE id = ?", job.id) == [(b"kept",)]


async def test_a_jobs_end_does_not_write_its_payload_again(
    store: LocalStore, tmp_path: Path
) -> None:
    job = await submit_one(store, payload=b"kept")
    claimed = await claim_one(store)
    await journal_of(store).flush()
    statements: list[str] = []
    journal_of(store).writer.con.set_trace_callback(statements.append)

    await complete(store, claimed, b"made")
    await journal_of(store).flush()

    assert not any("blob_payload" in statement for statement in statements)
    assert query(tmp_path, "SELECT data FROM blob_payload WHERE id = ?", job.id) == [(b"kept",)]
    assert query(tmp_path, "SELECT data FROM blob_result WHERE id = ?", job.id) == [(b"made",)]


async def test_a_new_job_deletes_nothing(store: LocalStore) -> None:
    await submit_one(store)  # the first commit also looks for expired rows
    await journal_of(store).flush()
    statements: list[str] = []
    journal_of(store).writer.con.set_trace_callback(statements.append)

    await submit_one(store)
    await journal_of(store).flush()

    assert any("INSERT INTO records" in statement for statement in statements)
    assert [s for s in statements if "DELETE" in s] == []


async def test_the_meta_values_are_written_at_most_once_per_lazy_delay(tmp_path: Path) -> None:
    store = await open_store(tmp_path, housekeeping_every=3600, lazy_delay=3600)
    try:
        await submit_one(store)  # the first commit writes them
        statements: list[str] = []
        journal_of(store).writer.con.set_trace_callback(statements.append)
        for _ in range(3):
            await submit_one(store)
        written_meanwhile = [  # (the log's own row aside: journal.log_applied)
            statement for statement in statements
            if "meta" in statement and "log_applied" not in statement
        ]  # fmt: skip
        await journal_of(store).flush()
    finally:
        await store.close()

    assert written_meanwhile == []
    assert any("meta" in statement for statement in statements)  # the flush wrote them
