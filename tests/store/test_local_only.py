"""LocalStore specifics the contract suite cannot see: its ordered queue, costs, close()."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from types import AsyncGeneratorType
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import StoreSettings, StoreUnavailable
from store.memory import LocalStore
from store.memory.queue import OrderedQueue as _OrderedQueue
from store.memory.record import Record as _Record
from store.model import ClaimedJob, Job, JobSpec, JobStatus, ResultReport, SubmitRequest
from tests.helpers import assert_eventually
from tests.store.conftest import MODEL, TENANT, claim_is_waiting

# -- the ordered queue against a plain sorted list ------------------------------------

QUEUE_OPS = st.lists(
    st.tuples(st.sampled_from(["append", "take", "restore", "forget", "pop"]), st.integers(0, 40)),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(QUEUE_OPS)
def test_ordered_queue_matches_a_sorted_list(ops: list[tuple[str, int]]) -> None:
    # scores repeat (fair share gives two tenants equal passes): ties go by id
    queue = _OrderedQueue()
    score_of: dict[str, float] = {}
    shown: set[str] = set()
    counter = 0
    for op, pick in ops:
        owned = sorted(score_of, key=lambda j: (score_of[j], j))
        if op == "append" or not owned:
            counter += 1
            job_id = f"j{counter:03d}"
            score_of[job_id] = float(pick % 7)
            queue.append(job_id, score_of[job_id])
            shown.add(job_id)
            continue
        job_id = owned[pick % len(owned)]
        if op == "take":
            queue.take(job_id)
            shown.discard(job_id)
        elif op == "restore":
            queue.restore(job_id)
            shown.add(job_id)
        elif op == "forget":
            queue.forget(job_id)
            del score_of[job_id]
            shown.discard(job_id)
        elif op == "pop" and shown:
            head = queue.first()
            expected = min((score_of[j], j) for j in shown)
            assert head == expected
            queue.take(expected[1])
            shown.discard(expected[1])
        visible = sorted((score_of[j], j) for j in shown)
        assert len(queue) == len(visible)
        assert queue.first() == (visible[0] if visible else None)
        for job_id, score in score_of.items():
            assert queue.rank(job_id) == sum(1 for entry in visible if entry < (score, job_id))


# -- costs --------------------------------------------------------------------------------


class CountingDict(dict[str, _Record]):
    """A job table that counts lookups, to show what an operation touches."""

    lookups = 0

    def get(self, key: str, default: object = None) -> _Record | None:  # type: ignore[override]
        CountingDict.lookups += 1
        return super().get(key)

    def __getitem__(self, key: str) -> _Record:
        CountingDict.lookups += 1
        return super().__getitem__(key)


async def test_recover_touches_only_what_fell_due() -> None:
    store = LocalStore(StoreSettings(lease_timeout=timedelta(seconds=60)))
    for _ in range(2000):
        await store.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL)))
    await store.claim("w1", [MODEL], max_jobs=2000)
    table = CountingDict(store.engine.state.jobs)
    store.engine.state.jobs = table
    CountingDict.lookups = 0
    assert await store.recover() == []
    assert CountingDict.lookups == 0


async def test_claim_cost_does_not_grow_with_queue_depth() -> None:
    async def lookups_for_one_claim(depth: int) -> int:
        store = LocalStore(StoreSettings())
        for _ in range(depth):
            await store.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL)))
        store.engine.state.jobs = CountingDict(store.engine.state.jobs)
        CountingDict.lookups = 0
        await store.claim("w1", [MODEL])
        return CountingDict.lookups

    shallow = await lookups_for_one_claim(10)
    assert shallow > 0
    assert await lookups_for_one_claim(5000) == shallow


# -- close and copies ------------------------------------------------------------------------


async def test_close_wakes_a_waiting_claim_which_returns_empty() -> None:
    store = LocalStore(StoreSettings())
    waiting = asyncio.create_task(store.claim("w1", [MODEL], wait=timedelta(seconds=30)))
    await claim_is_waiting(store, MODEL)
    await store.close()
    assert await asyncio.wait_for(waiting, timeout=2) == []


async def watch_is_waiting(stream: AsyncIterator[Job]) -> None:
    """Return once the watch generator is parked waiting for a change (not at its yield)."""
    generator = cast(AsyncGeneratorType[Job, None], stream)

    async def parked() -> bool:
        return generator.ag_await is not None

    await assert_eventually(parked, message="the watch is not waiting")


async def test_close_ends_a_watch() -> None:
    store = LocalStore(StoreSettings())
    job = (await store.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL)))).job
    stream = store.watch(TENANT, job.id)
    await anext(stream)
    waiting = asyncio.ensure_future(anext(stream))
    await watch_is_waiting(stream)
    await store.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, timeout=2)


async def test_a_closed_store_is_unavailable() -> None:
    store = LocalStore(StoreSettings())
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.ping()
    with pytest.raises(StoreUnavailable):
        await store.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL)))


async def test_an_illegal_transition_is_refused() -> None:
    store = LocalStore(StoreSettings())
    job = (await store.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL)))).job
    await store.cancel(TENANT, job.id)
    with pytest.raises(RuntimeError, match="illegal transition"):
        store.engine.state.transition(store.engine.state.jobs[job.id], JobStatus.COMPLETED, 0.0)


async def test_claimed_snapshots_are_copies() -> None:
    store = LocalStore(StoreSettings())
    await store.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL, labels={"a": "1"})))
    claimed = (await store.claim("w1", [MODEL]))[0]
    assert isinstance(claimed.job.labels, dict)
    claimed.job.labels["a"] = "2"
    assert (await store.get(TENANT, claimed.job.id)).labels == {"a": "1"}


async def test_stale_deadlines_are_swept_so_memory_follows_live_jobs() -> None:
    store = LocalStore(StoreSettings())
    await store.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL)))
    held = (await store.claim("w1", [MODEL]))[0]
    for _ in range(3000):
        await store.heartbeat(held.job.id, held.lease_id, 0.0, "")
        await store.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL)))
        claimed = (await store.claim("w1", [MODEL]))[0]
        await store.set_result(claimed.job.id, claimed.lease_id, JobStatus.COMPLETED)
    # Each finished attempt left a run deadline an hour away, and each
    # heartbeat a superseded lease deadline; only one job is live.
    assert len(store.engine.state.runs) <= 2 * 1 + 1024
    assert len(store.engine.state.leases) <= 2 * 1 + 1024
    assert len(store.engine.state.queue_waits) <= 2 * 1 + 1024


# -- wake-ups are routed ---------------------------------------------------------------------


async def test_changes_to_another_models_jobs_wake_no_watch_and_no_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = LocalStore(StoreSettings())
    jobs = [(await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job for _ in range(50)]
    watches = [store.watch(TENANT, job.id) for job in jobs]
    for watch in watches:
        await anext(watch)
    pending = [asyncio.ensure_future(anext(watch)) for watch in watches]
    claims = [
        asyncio.ensure_future(store.claim(f"w{i}", ["idle"], wait=timedelta(seconds=30)))
        for i in range(20)
    ]
    await claim_is_waiting(store, "idle")
    watched = {job.id for job in jobs}
    reads: list[object] = []  # watched jobs re-read, model lists a claim looked at
    fresh, claim_now = store.engine.state.fresh, store.engine._claim

    def counting_fresh(job_id: str, now: float) -> _Record | None:
        if job_id in watched:
            reads.append(job_id)
        return fresh(job_id, now)

    def counting_claim(worker_id: str, models: list[str], max_jobs: int) -> list[ClaimedJob]:
        reads.append(models)
        return claim_now(worker_id, models, max_jobs)

    monkeypatch.setattr(store.engine.state, "fresh", counting_fresh)
    monkeypatch.setattr(store.engine, "_claim", counting_claim)
    for _ in range(10):
        await store.submit(SubmitRequest(TENANT, JobSpec("other")))
        claimed = await store.claim("busy", ["other"])
        report = ResultReport(JobStatus.COMPLETED)
        await store.record_result(claimed[0].job.id, claimed[0].lease_id, report)
    for _ in range(20):
        await asyncio.sleep(0)  # let any wrongly woken waiter run
    assert reads == [["other"]] * 10  # the test's own claims, nothing else
    for task in [*pending, *claims]:
        task.cancel()
