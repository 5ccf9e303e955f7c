"""Contract: claim order, batching, long-poll, leases, heartbeats and set_result."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from jobgate.v1.limits import MAX_JOBS_PER_CLAIM
from store import InvalidRequest, JobCancelled, JobNotFound, LeaseLost, Store
from store.model import ClaimedJob, JobStatus, Priority, ResultReport
from tests.helpers import assert_eventually
from tests.store.conftest import (
    MODEL,
    TENANT,
    MakeStore,
    claim_is_waiting,
    claim_one,
    complete,
    submit_group,
    submit_one,
)
from tests.timings import Timings

# -- order ----------------------------------------------------------------------


async def test_claim_takes_the_highest_priority_first(store: Store) -> None:
    batch = await submit_one(store, priority=Priority.BATCH)
    system = await submit_one(store, priority=Priority.SYSTEM)
    interactive = await submit_one(store, priority=Priority.INTERACTIVE)
    order = [(await claim_one(store)).job.id for _ in range(3)]
    assert order == [interactive.id, system.id, batch.id]


async def test_claim_is_fifo_inside_a_priority(store: Store) -> None:
    jobs = [await submit_one(store) for _ in range(5)]
    order = [(await claim_one(store)).job.id for _ in range(5)]
    assert order == [job.id for job in jobs]


async def test_claim_is_fifo_across_the_models_a_worker_serves(store: Store) -> None:
    first = await submit_one(store, model="b")
    second = await submit_one(store, model="a")
    third = await submit_one(store, model="b")
    order = [(await claim_one(store, models=["a", "b"])).job.id for _ in range(3)]
    assert order == [first.id, second.id, third.id]


async def test_claim_takes_only_the_given_models(store: Store) -> None:
    await submit_one(store, model="other")
    assert await store.claim("w1", [MODEL]) == []
    assert (await store.claim("w1", ["other"]))[0].job.model == "other"


async def test_claim_with_nothing_queued_returns_empty(store: Store) -> None:
    assert await store.claim("w1", [MODEL]) == []


# -- batching ---------------------------------------------------------------------


async def test_max_jobs_returns_up_to_that_many_in_claim_order(store: Store) -> None:
    low = await submit_one(store, priority=Priority.BATCH)
    high = [await submit_one(store, priority=Priority.INTERACTIVE) for _ in range(3)]
    claimed = await store.claim("w1", [MODEL], max_jobs=3)
    assert [c.job.id for c in claimed] == [job.id for job in high]
    assert (await store.get(TENANT, low.id)).status is JobStatus.QUEUED


async def test_max_jobs_returns_what_there_is(store: Store) -> None:
    await submit_one(store)
    await submit_one(store)
    claimed = await store.claim("w1", [MODEL], max_jobs=8)
    assert len(claimed) == 2


async def test_a_claim_takes_at_most_max_claim_jobs(store: Store) -> None:
    for _ in range(MAX_JOBS_PER_CLAIM + 1):
        await submit_one(store)
    claimed = await store.claim("w1", [MODEL], max_jobs=MAX_JOBS_PER_CLAIM + 1)
    assert len(claimed) == MAX_JOBS_PER_CLAIM


async def test_a_claim_for_no_models_returns_at_once_with_nothing(store: Store) -> None:
    await submit_one(store)
    async with asyncio.timeout(30):  # without the rule it would wait the full 600 s
        assert await store.claim("w1", [], wait=timedelta(seconds=600)) == []


async def test_each_job_of_a_batch_has_its_own_lease(store: Store) -> None:
    for _ in range(3):
        await submit_one(store)
    claimed = await store.claim("w1", [MODEL], max_jobs=3)
    assert len({c.lease_id for c in claimed}) == 3


# -- long-poll ----------------------------------------------------------------------


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_waiting_claim_wakes_as_soon_as_a_job_is_submitted(store: Store) -> None:
    waiting = asyncio.create_task(store.claim("w1", [MODEL], wait=timedelta(seconds=30)))
    await claim_is_waiting(store)
    job = await submit_one(store)
    # Without the wake-up the claim would sleep out its 30 s wait (no re-check).
    claimed = await asyncio.wait_for(waiting, timeout=20)
    assert [c.job.id for c in claimed] == [job.id]


async def test_waiting_claim_returns_empty_when_wait_passes(store: Store, timings: Timings) -> None:
    started = time.monotonic()
    claimed = await store.claim("w1", [MODEL], wait=timedelta(seconds=0.3))
    elapsed = time.monotonic() - started
    assert claimed == []
    assert elapsed >= 0.25
    timings("long poll: an empty answer past its wait", elapsed - 0.3, "store")


async def test_waiting_claim_ignores_jobs_for_other_models(store: Store) -> None:
    waiting = asyncio.create_task(store.claim("w1", [MODEL], wait=timedelta(seconds=1)))
    await claim_is_waiting(store)
    await submit_one(store, model="other")
    assert await waiting == []


async def start_waiting_claim(store: Store) -> asyncio.Task[list[ClaimedJob]]:
    """A claim long-polling for 30 s, already waiting when this returns.

    Tests using it take `pushed_wake_ups_only`: the claim returns its job
    only if the transition under test woke it.
    """
    waiting = asyncio.create_task(store.claim("waiter", [MODEL], wait=timedelta(seconds=30)))
    await claim_is_waiting(store)
    return waiting


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_waiting_claim_wakes_when_a_held_child_is_released(store: Store) -> None:
    group = await submit_group(store, 2, max_parallel=1)
    first = await claim_one(store)
    waiting = await start_waiting_claim(store)
    await complete(store, first)
    claimed = await asyncio.wait_for(waiting, timeout=20)
    assert [c.job.id for c in claimed] == [group.children[1].id]


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_waiting_claim_wakes_when_recovery_requeues_a_job(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=0.2))
    job = await submit_one(store)
    await claim_one(store)
    waiting = await start_waiting_claim(store)

    async def requeued() -> bool:
        await store.recover()
        return waiting.done()

    await assert_eventually(requeued, timeout=20)
    assert [c.job.id for c in waiting.result()] == [job.id]


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_waiting_claim_wakes_when_a_retry_becomes_due(make_store: MakeStore) -> None:
    store = await make_store(retry_backoff_base=timedelta(seconds=0.2))
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.set_result(job.id, claimed.lease_id, JobStatus.FAILED, retryable=True)
    waiting = await start_waiting_claim(store)

    async def promoted() -> bool:
        await store.recover()
        return waiting.done()

    await assert_eventually(promoted, timeout=20)
    assert [c.job.id for c in waiting.result()] == [job.id]


# -- what a claim stamps --------------------------------------------------------------


async def test_claim_stamps_processing_attempt_worker_and_lease(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=30))
    job = await submit_one(store)
    before = time.time()
    claimed = await claim_one(store, worker="gpu-7")
    assert claimed.job.id == job.id
    assert claimed.job.status is JobStatus.PROCESSING
    assert claimed.job.attempts == 1
    assert claimed.job.worker_id == "gpu-7"
    assert claimed.lease_id
    lease_left = claimed.lease_expire_time.timestamp() - before
    assert 28 <= lease_left <= 32
    stored = await store.get(TENANT, job.id)
    assert (stored.status, stored.attempts, stored.worker_id) == (
        JobStatus.PROCESSING,
        1,
        "gpu-7",
    )


async def test_claim_returns_the_payload(store: Store) -> None:
    await submit_one(store, payload=b"tensor bytes")
    assert (await claim_one(store)).payload == b"tensor bytes"


async def test_a_claimed_job_is_not_claimed_again(store: Store) -> None:
    await submit_one(store)
    await claim_one(store)
    assert await store.claim("w2", [MODEL]) == []


# -- heartbeat -------------------------------------------------------------------------


async def test_heartbeat_extends_the_lease(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=0.5))
    await submit_one(store)
    claimed = await claim_one(store)

    async def extended() -> bool:
        # The first beats may share the claim's clock tick (Redis keeps milliseconds).
        beat = await store.heartbeat(claimed.job.id, claimed.lease_id, 0.1, "")
        assert not beat.cancel_requested
        return beat.lease_expire_time > claimed.lease_expire_time

    await assert_eventually(extended, interval=0.005)


async def test_heartbeats_keep_a_job_past_its_first_lease_deadline(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=0.4))
    job = await submit_one(store)
    claimed = await claim_one(store)
    # Beat until the first lease would have lapsed twice over, then check nothing was requeued.
    past = claimed.lease_expire_time + timedelta(seconds=0.4)

    async def beaten_past_the_first_deadline() -> bool:
        beat = await store.heartbeat(job.id, claimed.lease_id, 0.5, "")
        return beat.lease_expire_time - timedelta(seconds=0.4) > past

    await assert_eventually(beaten_past_the_first_deadline, interval=0.1)
    assert await store.recover() == []
    assert (await store.get(TENANT, job.id)).status is JobStatus.PROCESSING


async def test_heartbeat_records_progress_and_stage(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.heartbeat(job.id, claimed.lease_id, 0.25, "decoding")
    got = await store.get(TENANT, job.id)
    assert (got.progress, got.stage) == (0.25, "decoding")


async def test_heartbeat_with_empty_stage_keeps_the_stage(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.heartbeat(job.id, claimed.lease_id, 0.25, "decoding")
    await store.heartbeat(job.id, claimed.lease_id, 0.5, "")
    got = await store.get(TENANT, job.id)
    assert (got.progress, got.stage) == (0.5, "decoding")


async def test_heartbeat_with_a_stale_lease_is_lease_lost_and_changes_nothing(
    store: Store,
) -> None:
    job = await submit_one(store)
    await claim_one(store)
    before = await store.get(TENANT, job.id)
    with pytest.raises(LeaseLost):
        await store.heartbeat(job.id, "not-the-lease", 0.9, "hijacked")
    after = await store.get(TENANT, job.id)
    assert (after.progress, after.stage, after.status) == (
        before.progress,
        before.stage,
        before.status,
    )


async def test_heartbeat_after_the_job_completed_is_lease_lost(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store)
    await complete(store, claimed)
    with pytest.raises(LeaseLost):
        await store.heartbeat(claimed.job.id, claimed.lease_id, 1.0, "")


async def test_heartbeat_of_an_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await store.heartbeat("01J00000000000000000000000", "lease", 0.0, "")


async def test_set_result_of_an_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await store.set_result("01J00000000000000000000000", "lease", JobStatus.COMPLETED)


# -- set_result --------------------------------------------------------------------------


async def test_completed_result_is_stored(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    done = await store.set_result(
        job.id, claimed.lease_id, JobStatus.COMPLETED, b"answer", "text/plain"
    )
    assert done.status is JobStatus.COMPLETED
    got = await store.get(TENANT, job.id)
    assert (got.status, got.result, got.result_content_type) == (
        JobStatus.COMPLETED,
        b"answer",
        "text/plain",
    )
    assert got.end_time is not None


async def test_failed_result_keeps_the_error(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.set_result(
        job.id,
        claimed.lease_id,
        JobStatus.FAILED,
        error_code="HANDLER_ERROR",
        error_message="boom",
    )
    got = await store.get(TENANT, job.id)
    assert (got.status, got.error_code, got.error_message) == (
        JobStatus.FAILED,
        "HANDLER_ERROR",
        "boom",
    )


async def test_set_result_with_a_stale_lease_is_lease_lost_and_changes_nothing(
    store: Store,
) -> None:
    job = await submit_one(store)
    await claim_one(store)
    with pytest.raises(LeaseLost):
        await store.set_result(job.id, "not-the-lease", JobStatus.COMPLETED, b"forged")
    got = await store.get(TENANT, job.id)
    assert (got.status, got.result) == (JobStatus.PROCESSING, b"")


async def test_repeated_set_result_returns_the_stored_job_unchanged(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    first = await complete(store, claimed, b"answer")
    events_before = await store.events(count=1000)
    again = await complete(store, claimed, b"answer")
    assert again.status is JobStatus.COMPLETED
    assert again.result == b"answer"
    assert again.update_time == first.update_time
    assert await store.events(count=1000) == events_before
    assert (await store.get(TENANT, job.id)).end_time == first.end_time


async def test_record_result_says_whether_the_call_changed_the_job(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store)
    report = ResultReport(JobStatus.COMPLETED, b"answer")
    first = await store.record_result(claimed.job.id, claimed.lease_id, report)
    again = await store.record_result(claimed.job.id, claimed.lease_id, report)
    assert (first.applied, again.applied) == (True, False)
    assert again.job == first.job


async def test_set_result_with_the_same_lease_but_another_outcome_is_lease_lost(
    store: Store,
) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await complete(store, claimed, b"answer")
    with pytest.raises(LeaseLost):
        await store.set_result(job.id, claimed.lease_id, JobStatus.FAILED, error_code="X")
    assert (await store.get(TENANT, job.id)).status is JobStatus.COMPLETED


async def test_set_result_accepts_only_completed_or_failed(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    with pytest.raises(InvalidRequest):
        await store.set_result(job.id, claimed.lease_id, JobStatus.CANCELLED)
    assert (await store.get(TENANT, job.id)).status is JobStatus.PROCESSING


async def test_set_result_after_cancel_is_job_cancelled(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.cancel(TENANT, job.id, "user asked")
    with pytest.raises(JobCancelled):
        await complete(store, claimed)
    got = await store.get(TENANT, job.id)
    assert (got.status, got.result) == (JobStatus.CANCELLED, b"")


async def test_heartbeat_after_cancel_answers_cancel_requested(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.cancel(TENANT, job.id)
    beat = await store.heartbeat(job.id, claimed.lease_id, 0.5, "")
    assert beat.cancel_requested


# -- concurrency ----------------------------------------------------------------------------


async def test_concurrent_claimers_get_each_job_exactly_once(store: Store) -> None:
    submitted = {(await submit_one(store)).id for _ in range(200)}
    claimed: list[str] = []

    async def claimer(worker: str) -> None:
        while batch := await store.claim(worker, [MODEL], max_jobs=3):
            claimed.extend(c.job.id for c in batch)

    await asyncio.gather(*(claimer(f"w{i}") for i in range(8)))
    assert len(claimed) == 200
    assert set(claimed) == submitted


# -- gauges -----------------------------------------------------------------------------------


async def test_queue_depths_count_claimable_jobs_per_model_and_priority(store: Store) -> None:
    await submit_one(store, priority=Priority.INTERACTIVE)
    await submit_one(store)
    await submit_one(store)
    await submit_one(store, model="other")
    await claim_one(store, models=["other"])
    depths = {key: n for key, n in (await store.queue_depths()).items() if n}
    assert depths == {(MODEL, Priority.INTERACTIVE): 1, (MODEL, Priority.BATCH): 2}


async def test_in_flight_counts_processing_jobs_per_model(store: Store) -> None:
    for _ in range(3):
        await submit_one(store)
    await submit_one(store, model="other")
    first = await claim_one(store)
    await claim_one(store)
    await claim_one(store, models=["other"])
    await complete(store, first)
    flying = {model: n for model, n in (await store.in_flight()).items() if n}
    assert flying == {MODEL: 1, "other": 1}
