"""A restart in two steps: live work answers first, the finished jobs are merged behind it.

The finished jobs' load is held (`held_backfill`) at the reopen, so each
test sees the store between the two steps for as long as it needs.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import StoreUnavailable
from store.journal import loading
from store.memory import LocalStore, durable
from store.model import GroupSpec, JobFilter, JobStatus, Priority, ResultReport, SubmitRequest
from tests.store.conftest import TENANT, claim_one, spec, submit_group, submit_one
from tests.store.durable import open_store, query


class HeldBackfill:
    """While held, the finished records' reader waits for `release` before it reads anything."""

    def __init__(self) -> None:
        self.parent = ""  # parent_first's group
        self._released = threading.Event()
        self._released.set()

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def wait(self) -> None:
        self._released.wait(30)


@pytest.fixture
def held_backfill(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldBackfill]:
    held = HeldBackfill()
    read_closed = loading.read_closed

    def waiting(*args: Any) -> None:
        held.wait()
        read_closed(*args)

    monkeypatch.setattr(loading, "read_closed", waiting)
    yield held
    held.release()  # a test that failed early leaves no thread waiting


async def _complete_next(store: LocalStore) -> str:
    """Claims the next queued job and completes it."""
    claimed = await claim_one(store)
    report = ResultReport(JobStatus.COMPLETED, b"ok")
    await store.record_result(claimed.job.id, claimed.lease_id, report)
    return claimed.job.id


async def _completed_job(store: LocalStore, key: str = "") -> str:
    job = await submit_one(store, key=key)
    completed = await _complete_next(store)
    assert completed == job.id
    return job.id


async def _pending(call: Any) -> asyncio.Task[Any]:
    """`call` as a task, once it has run as far as it can (it waits on something)."""
    task: asyncio.Task[Any] = asyncio.ensure_future(call)
    for _ in range(20):  # a call that needs nothing loaded finishes within a few steps
        await asyncio.sleep(0)
    return task


async def test_a_queued_job_is_answered_before_the_finished_jobs_are_loaded(
    tmp_path: Path, held_backfill: HeldBackfill
) -> None:
    store = await open_store(tmp_path)
    done = await _completed_job(store)
    queued = await submit_one(store)
    await store.close()

    held_backfill.hold()
    store = await open_store(tmp_path, loaded=False)
    try:
        got = await store.get(TENANT, queued.id)
        claimed = await claim_one(store)
        finished = await _pending(store.get(TENANT, done))
        waited = finished.done()
        held_backfill.release()
        completed = await finished
    finally:
        await store.close()

    assert got.status is JobStatus.QUEUED
    assert claimed.job.id == queued.id
    assert not waited
    assert completed.status is JobStatus.COMPLETED


async def test_a_keyed_submit_waits_for_the_finished_job_that_holds_its_key(
    tmp_path: Path, held_backfill: HeldBackfill
) -> None:
    store = await open_store(tmp_path)
    done = await _completed_job(store, key="nightly")
    await store.close()

    held_backfill.hold()
    store = await open_store(tmp_path, loaded=False)
    try:
        request = SubmitRequest(
            tenant=TENANT, work=spec(), priority=Priority.BATCH, idempotency_key="nightly"
        )
        submitted = await _pending(store.submit(request))
        waited = submitted.done()
        held_backfill.release()
        result = await submitted
    finally:
        await store.close()

    assert not waited
    assert result.reused and result.job.id == done


async def test_listing_waits_for_the_finished_jobs(
    tmp_path: Path, held_backfill: HeldBackfill
) -> None:
    store = await open_store(tmp_path)
    done = await _completed_job(store)
    queued = await submit_one(store)
    await store.close()

    held_backfill.hold()
    store = await open_store(tmp_path, loaded=False)
    try:
        listed = await _pending(store.list_jobs(TENANT, JobFilter(), None, 10))
        waited = listed.done()
        held_backfill.release()
        page = await listed
    finally:
        await store.close()

    assert not waited
    assert [job.id for job in page.jobs] == [queued.id, done]


async def test_finished_jobs_that_cannot_be_read_answer_unavailable_and_live_ones_still_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(tmp_path)
    done = await _completed_job(store)
    queued = await submit_one(store)
    await store.close()

    def broken(*args: Any) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(loading, "read_closed", broken)
    store = await open_store(tmp_path, loaded=False)
    try:
        with pytest.raises(StoreUnavailable, match="finished jobs"):
            await store.get(TENANT, done)
        live = await store.get(TENANT, queued.id)
    finally:
        await store.close()

    assert live.status is JobStatus.QUEUED


async def test_a_call_waiting_for_the_finished_jobs_gets_unavailable_when_the_store_closes(
    tmp_path: Path, held_backfill: HeldBackfill
) -> None:
    store = await open_store(tmp_path)
    done = await _completed_job(store)
    await store.close()

    held_backfill.hold()
    store = await open_store(tmp_path, loaded=False)
    finished = await _pending(store.get(TENANT, done))
    await store.close()

    with pytest.raises(StoreUnavailable):
        await finished


async def test_a_job_that_finishes_while_the_finished_jobs_load_is_listed_once(
    tmp_path: Path, held_backfill: HeldBackfill
) -> None:
    store = await open_store(tmp_path)
    await _completed_job(store)
    queued = await submit_one(store)
    await store.close()

    held_backfill.hold()
    store = await open_store(tmp_path, loaded=False)
    try:
        finishing = await _complete_next(store)  # in memory, now finished in the file too
        held_backfill.release()  # the reader's snapshot holds it finished too
        await store.engine.fully_loaded()
        page = await store.list_jobs(TENANT, JobFilter(), None, 10)
        job = await store.get(TENANT, finishing)
    finally:
        await store.close()

    assert finishing == queued.id
    assert [listed.id for listed in page.jobs].count(finishing) == 1
    assert len(page.jobs) == 2
    assert job.status is JobStatus.COMPLETED


@pytest.fixture
def parent_first(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldBackfill]:
    """The finished records' reader delivers a group's parent (job id in `.parent`)
    alone, then holds its children until released."""
    held = HeldBackfill()
    read_closed = loading.read_closed

    def reading(*args: Any) -> None:
        path, tables, lazy, deliver, stop = args

        def split(records: dict[Any, Any]) -> None:
            if held.parent in records:
                deliver({held.parent: records.pop(held.parent)})
                held.wait()
            deliver(records)

        read_closed(path, tables, lazy, split, stop)

    monkeypatch.setattr(loading, "read_closed", reading)
    yield held
    held.release()


async def _finished_group(tmp_path: Path, held: HeldBackfill, key: str = "") -> LocalStore:
    """A store reopened on a finished group of two whose parent is merged, its children not."""
    store = await open_store(tmp_path)
    group = await submit_group(store, 2, key=key)
    await _complete_next(store)
    await _complete_next(store)
    await store.close()
    held.parent = group.id
    held.hold()
    store = await open_store(tmp_path, loaded=False)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while group.id not in store.engine.state.jobs:  # merged on the loop after delivery
        assert loop.time() < deadline, "the parent was never merged"
        await asyncio.sleep(0.01)
    return store


async def test_a_finished_groups_get_waits_for_children_loaded_after_it(
    tmp_path: Path, parent_first: HeldBackfill
) -> None:
    store = await _finished_group(tmp_path, parent_first)
    try:
        got = await _pending(store.get(TENANT, parent_first.parent))
        waited = got.done()
        parent_first.release()
        group = await got
    finally:
        await store.close()

    assert not waited
    assert [child.status for child in group.children] == [JobStatus.COMPLETED] * 2


async def test_a_finished_groups_children_are_listed_once_loaded(
    tmp_path: Path, parent_first: HeldBackfill
) -> None:
    store = await _finished_group(tmp_path, parent_first)
    try:
        listed = await _pending(store.list_children(TENANT, parent_first.parent))
        waited = listed.done()
        parent_first.release()
        children = await listed
    finally:
        await store.close()

    assert not waited
    assert [child.status for child in children] == [JobStatus.COMPLETED] * 2


async def test_a_keyed_submit_of_a_finished_group_waits_for_its_children(
    tmp_path: Path, parent_first: HeldBackfill
) -> None:
    store = await _finished_group(tmp_path, parent_first, key="weekly")
    try:
        request = SubmitRequest(
            tenant=TENANT,
            work=GroupSpec(children=tuple(spec(payload=f"child {i}".encode()) for i in range(2))),
            priority=Priority.BATCH,
            idempotency_key="weekly",
        )
        submitted = await _pending(store.submit(request))
        waited = submitted.done()
        parent_first.release()
        result = await submitted
    finally:
        await store.close()

    assert not waited
    assert result.reused and len(result.job.children) == 2


async def test_a_retried_groups_completed_child_is_live_again_after_a_restart(
    tmp_path: Path, held_backfill: HeldBackfill
) -> None:
    store = await open_store(tmp_path)
    group = await submit_group(store, 2)
    await _complete_next(store)
    failed = await claim_one(store)
    report = ResultReport(JobStatus.FAILED, error_code="BAD_INPUT", error_message="no")
    await store.record_result(failed.job.id, failed.lease_id, report)
    await store.retry_job(TENANT, group.id)
    await store.close()

    held_backfill.hold()  # nothing finished may be needed from here on
    store = await open_store(tmp_path, loaded=False)
    try:
        rerun = await _complete_next(store)  # its group's other child must be in memory
        finished = await store.get(TENANT, group.id)
    finally:
        await store.close()

    assert rerun == failed.job.id
    assert finished.status is JobStatus.COMPLETED


async def _retried_group_with_a_stale_child(tmp_path: Path) -> tuple[str, str, str]:
    """A retried group whose kept COMPLETED child still has a past expiry in the
    file, as RetryJob left it before it marked that child; (group, kept, re-run)."""
    store = await open_store(tmp_path)
    group = await submit_group(store, 2)
    kept = await _complete_next(store)
    failed = await claim_one(store)
    report = ResultReport(JobStatus.FAILED, error_code="BAD_INPUT", error_message="no")
    await store.record_result(failed.job.id, failed.lease_id, report)
    await store.retry_job(TENANT, group.id)
    await store.close()
    con = sqlite3.connect(tmp_path / "jobgate.db")
    with con:
        con.execute("UPDATE records SET expire_at = 1 WHERE id = ?", (kept,))
    con.close()
    return group.id, kept, failed.job.id


async def test_an_old_files_retried_group_finishes_after_a_restart(
    tmp_path: Path, held_backfill: HeldBackfill
) -> None:
    group, _, failed = await _retried_group_with_a_stale_child(tmp_path)

    held_backfill.hold()
    store = await open_store(tmp_path, loaded=False)
    try:
        rerun = await _complete_next(store)
        finished = await store.get(TENANT, group)
    finally:
        await store.close()

    assert rerun == failed
    assert finished.status is JobStatus.COMPLETED


async def test_an_old_files_stale_child_expiry_is_cleared_in_the_file_at_start(
    tmp_path: Path,
) -> None:
    _, kept, _ = await _retried_group_with_a_stale_child(tmp_path)

    store = await open_store(tmp_path)
    try:
        await store.engine.settled()
        stored = query(tmp_path, "SELECT expire_at FROM records WHERE id = ?", kept)
    finally:
        await store.close()

    assert stored == [(None,)]


async def test_a_merge_that_fails_answers_unavailable_instead_of_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(tmp_path)
    done = await _completed_job(store)
    await store.close()

    add = durable.Backfill.add

    def broken(self: durable.Backfill, records: dict[Any, Any]) -> None:
        if done in records:  # the finished job's chunk, not the open records' restore
            raise RuntimeError("a bug in the merge")
        add(self, records)

    monkeypatch.setattr(durable.Backfill, "add", broken)
    store = await open_store(tmp_path, loaded=False)
    try:
        with pytest.raises(StoreUnavailable, match="a bug in the merge"):
            await asyncio.wait_for(store.get(TENANT, done), timeout=10)
    finally:
        await store.close()


async def test_finished_jobs_merged_before_a_failed_read_still_expire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(tmp_path)
    done = await _completed_job(store)
    await store.close()
    read_closed = loading.read_closed

    def failing_after_the_first_chunk(*args: Any) -> None:
        path, tables, lazy, deliver, stop = args

        def deliver_then_fail(records: dict[Any, Any]) -> None:
            deliver(records)
            raise sqlite3.DatabaseError("database disk image is malformed")

        read_closed(path, tables, lazy, deliver_then_fail, stop)

    monkeypatch.setattr(loading, "read_closed", failing_after_the_first_chunk)
    store = await open_store(tmp_path, loaded=False)
    try:
        with pytest.raises(StoreUnavailable):
            await store.engine.fully_loaded()
        merged = done in store.engine.state.jobs
        expiries = len(store.engine.state.expiries)
    finally:
        await store.close()

    assert merged
    assert expiries == 1
