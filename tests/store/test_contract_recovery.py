"""Contract: recover() — lease expiry, run timeout, retry backoff, queue timeout."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta

import pytest

from store import LeaseLost, Store
from store.model import (
    ERROR_ATTEMPTS_EXHAUSTED,
    ERROR_QUEUE_TIMEOUT,
    ERROR_RUN_TIMEOUT,
    Job,
    JobStatus,
    Priority,
)
from tests.helpers import assert_eventually
from tests.store.conftest import (
    MODEL,
    TENANT,
    MakeStore,
    claim_one,
    complete,
    submit_one,
)

SHORT_LEASE = timedelta(seconds=0.3)


async def recover_until(store: Store, job_id: str, status: JobStatus) -> Job:
    """Call recover() until the job reaches `status` (what the servers' reaper does)."""

    async def reached() -> Job:
        await store.recover()
        job = await store.get(TENANT, job_id)
        assert job.status is status, f"still {job.status}"
        return job

    return await assert_eventually(reached, timeout=5)


# -- lease expiry -----------------------------------------------------------------


async def test_expired_lease_requeues_the_job(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    job = await submit_one(store)
    await claim_one(store)
    requeued = await recover_until(store, job.id, JobStatus.QUEUED)
    assert requeued.attempts == 1


async def test_expired_lease_requeues_at_the_original_place(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    first = await submit_one(store)
    await claim_one(store)
    later = await submit_one(store)
    await recover_until(store, first.id, JobStatus.QUEUED)
    assert (await store.get(TENANT, first.id)).queue_position == 0
    assert (await store.get(TENANT, later.id)).queue_position == 1
    again = await claim_one(store)
    assert again.job.id == first.id
    assert again.job.attempts == 2


async def test_each_claim_gets_a_new_lease_id(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    job = await submit_one(store)
    first = await claim_one(store)
    await recover_until(store, job.id, JobStatus.QUEUED)
    second = await claim_one(store)
    assert second.lease_id != first.lease_id


async def test_old_holder_cannot_finish_after_the_job_was_reclaimed(
    make_store: MakeStore,
) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    job = await submit_one(store)
    old = await claim_one(store, worker="slow")
    await recover_until(store, job.id, JobStatus.QUEUED)
    new = await claim_one(store, worker="fresh")
    with pytest.raises(LeaseLost):
        await complete(store, old, b"stale answer")
    with pytest.raises(LeaseLost):
        await store.heartbeat(job.id, old.lease_id, 0.5, "")
    done = await complete(store, new, b"fresh answer")
    assert (done.result, done.worker_id) == (b"fresh answer", "fresh")


async def test_old_holder_is_lease_lost_while_the_job_waits_requeued(
    make_store: MakeStore,
) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    job = await submit_one(store)
    old = await claim_one(store)
    await recover_until(store, job.id, JobStatus.QUEUED)
    with pytest.raises(LeaseLost):
        await complete(store, old)
    assert (await store.get(TENANT, job.id)).status is JobStatus.QUEUED


async def test_expired_lease_past_max_attempts_fails_attempts_exhausted(
    make_store: MakeStore,
) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE, max_attempts=2)
    job = await submit_one(store)
    await claim_one(store)
    await recover_until(store, job.id, JobStatus.QUEUED)
    await claim_one(store)
    failed = await recover_until(store, job.id, JobStatus.FAILED)
    assert failed.error_code == ERROR_ATTEMPTS_EXHAUSTED
    assert failed.attempts == 2
    assert await store.claim("w1", [MODEL]) == []


async def test_recover_reports_the_transitions_it_made(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    job = await submit_one(store)
    await claim_one(store)

    async def requeued() -> bool:
        events = await store.recover()
        assert [(e.job_id, e.from_status, e.to_status) for e in events] == [
            (job.id, JobStatus.PROCESSING, JobStatus.QUEUED)
        ]
        return True

    await assert_eventually(requeued)
    assert await store.recover() == []


async def test_recover_leaves_live_leases_alone(store: Store) -> None:
    job = await submit_one(store)
    await claim_one(store)
    assert await store.recover() == []
    assert (await store.get(TENANT, job.id)).status is JobStatus.PROCESSING


# -- run timeout ------------------------------------------------------------------------


async def test_run_timeout_fails_the_attempt_even_while_heartbeating(
    make_store: MakeStore,
) -> None:
    store = await make_store(retry_backoff_base=timedelta(seconds=0.01))
    job = await submit_one(store, run_timeout=timedelta(seconds=0.3))
    claimed = await claim_one(store)

    async def timed_out() -> Job:
        with contextlib.suppress(LeaseLost):
            await store.heartbeat(job.id, claimed.lease_id, 0.5, "")
        await store.recover()
        got = await store.get(TENANT, job.id)
        assert got.status is JobStatus.QUEUED, f"still {got.status}"
        return got

    requeued = await assert_eventually(timed_out)
    assert requeued.error_code == ERROR_RUN_TIMEOUT
    with pytest.raises(LeaseLost):
        await store.heartbeat(job.id, claimed.lease_id, 0.5, "")


async def test_run_timeout_on_the_last_attempt_fails_the_job(make_store: MakeStore) -> None:
    store = await make_store(max_attempts=1)
    job = await submit_one(store, run_timeout=timedelta(seconds=0.2))
    await claim_one(store)
    failed = await recover_until(store, job.id, JobStatus.FAILED)
    assert failed.error_code == ERROR_ATTEMPTS_EXHAUSTED


async def test_a_zero_run_timeout_setting_means_no_run_timeout(make_store: MakeStore) -> None:
    store = await make_store(run_timeout=timedelta(0))
    job = await submit_one(store)
    await claim_one(store)
    assert await store.recover() == []
    assert (await store.get(TENANT, job.id)).status is JobStatus.PROCESSING


# -- retryable failure --------------------------------------------------------------------


async def test_retryable_failure_requeues_only_after_the_backoff(make_store: MakeStore) -> None:
    store = await make_store(retry_backoff_base=timedelta(seconds=1))
    job = await submit_one(store)
    claimed = await claim_one(store)
    after = await store.set_result(
        job.id, claimed.lease_id, JobStatus.FAILED, error_code="OOM", retryable=True
    )
    assert after.status is JobStatus.QUEUED
    assert after.error_code == "OOM"
    await store.recover()
    assert await store.claim("w1", [MODEL]) == [], "claimable before the backoff ended"

    async def claimable() -> bool:
        await store.recover()
        again = await store.claim("w1", [MODEL])
        assert [c.job.id for c in again] == [job.id]
        assert again[0].job.attempts == 2
        return True

    await assert_eventually(claimable)


async def test_retryable_failure_on_the_last_attempt_fails_the_job(
    make_store: MakeStore,
) -> None:
    store = await make_store(max_attempts=1)
    job = await submit_one(store)
    claimed = await claim_one(store)
    failed = await store.set_result(
        job.id, claimed.lease_id, JobStatus.FAILED, error_code="OOM", retryable=True
    )
    assert failed.status is JobStatus.FAILED
    assert failed.error_code == ERROR_ATTEMPTS_EXHAUSTED


async def test_spec_max_attempts_overrides_the_default(make_store: MakeStore) -> None:
    store = await make_store(max_attempts=5)
    job = await submit_one(store, max_attempts=1)
    claimed = await claim_one(store)
    failed = await store.set_result(job.id, claimed.lease_id, JobStatus.FAILED, retryable=True)
    assert failed.status is JobStatus.FAILED


async def fail_retryably(store: Store, job_id: str) -> float:
    """Claim the job, fail it retryably, and return the time it takes to be claimable again."""
    claimed = await claim_one(store)
    assert claimed.job.id == job_id
    await store.set_result(job_id, claimed.lease_id, JobStatus.FAILED, retryable=True)
    failed_at = time.monotonic()

    async def claimable() -> bool:
        await store.recover()
        return (await store.queue_depths()).get((MODEL, Priority.BATCH)) == 1

    await assert_eventually(claimable, interval=0.01)
    return time.monotonic() - failed_at


async def test_retry_backoff_doubles_with_each_attempt(make_store: MakeStore) -> None:
    store = await make_store(retry_backoff_base=timedelta(seconds=0.25), max_attempts=5)
    job = await submit_one(store)
    assert await fail_retryably(store, job.id) >= 0.2
    assert await fail_retryably(store, job.id) >= 0.45


async def test_retry_backoff_is_capped(make_store: MakeStore) -> None:
    store = await make_store(
        retry_backoff_base=timedelta(seconds=5), retry_backoff_max=timedelta(seconds=0.2)
    )
    job = await submit_one(store)
    assert await fail_retryably(store, job.id) < 4


# -- queue timeout -------------------------------------------------------------------------


async def test_job_queued_past_its_queue_timeout_fails(store: Store) -> None:
    job = await submit_one(store, queue_timeout=timedelta(seconds=0.2))
    failed = await recover_until(store, job.id, JobStatus.FAILED)
    assert failed.error_code == ERROR_QUEUE_TIMEOUT
    assert await store.claim("w1", [MODEL]) == []


async def test_queue_timeout_comes_from_settings_by_default(make_store: MakeStore) -> None:
    store = await make_store(queue_timeout=timedelta(seconds=0.2))
    job = await submit_one(store)
    failed = await recover_until(store, job.id, JobStatus.FAILED)
    assert failed.error_code == ERROR_QUEUE_TIMEOUT


async def test_a_zero_queue_timeout_setting_means_no_queue_timeout(make_store: MakeStore) -> None:
    store = await make_store(queue_timeout=timedelta(0))
    job = await submit_one(store)
    assert await store.recover() == []
    assert (await store.get(TENANT, job.id)).status is JobStatus.QUEUED


async def test_a_claimed_job_does_not_queue_time_out(store: Store) -> None:
    job = await submit_one(store, queue_timeout=timedelta(seconds=0.2))
    claimed = await claim_one(store)
    past_timeout = time.time() + 0.3

    async def recovered_past_the_timeout() -> bool:
        await store.recover()
        return time.time() > past_timeout

    await assert_eventually(recovered_past_the_timeout)
    assert (await store.get(TENANT, job.id)).status is JobStatus.PROCESSING
    await complete(store, claimed)


async def test_queue_timeout_counts_from_the_last_requeue(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    job = await submit_one(store, queue_timeout=timedelta(seconds=0.6))
    claimed = await claim_one(store)
    # Hold the lease until the store's clock is past the queue timeout, then let it expire.
    queue_deadline = job.create_time + timedelta(seconds=0.7)

    async def held_past_the_queue_timeout() -> bool:
        beat = await store.heartbeat(job.id, claimed.lease_id, 0.0, "")
        return beat.lease_expire_time - SHORT_LEASE > queue_deadline

    await assert_eventually(held_past_the_queue_timeout, interval=0.05)
    requeued = await recover_until(store, job.id, JobStatus.QUEUED)
    assert requeued.error_code != ERROR_QUEUE_TIMEOUT
    assert (await claim_one(store)).job.id == job.id


# -- leadership ---------------------------------------------------------------------------


async def test_leadership_is_held_by_one_holder_until_it_expires(store: Store) -> None:
    assert await store.acquire_leadership("a", timedelta(seconds=0.3))
    assert await store.acquire_leadership("a", timedelta(seconds=0.3)), "renewal"
    assert not await store.acquire_leadership("b", timedelta(seconds=0.3))

    async def taken_over() -> bool:
        return await store.acquire_leadership("b", timedelta(seconds=5))

    await assert_eventually(taken_over)
    assert not await store.acquire_leadership("a", timedelta(seconds=0.3))


async def test_concurrent_recover_calls_handle_each_due_item_once(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    jobs = [await submit_one(store) for _ in range(20)]
    await store.claim("w1", [MODEL], max_jobs=20)
    lease_over = time.time() + SHORT_LEASE.total_seconds() + 0.05

    async def past_the_leases() -> bool:
        return time.time() > lease_over

    await assert_eventually(past_the_leases)
    results = await asyncio.gather(*(store.recover() for _ in range(4)))
    requeued = sorted(e.job_id for events in results for e in events)
    assert requeued == sorted(job.id for job in jobs)


async def test_a_late_heartbeat_before_recovery_keeps_the_lease(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=SHORT_LEASE)
    job = await submit_one(store)
    claimed = await claim_one(store)
    lease_over = claimed.lease_expire_time.timestamp() + 0.05

    async def past_the_lease() -> bool:
        return time.time() > lease_over

    await assert_eventually(past_the_lease)
    beat = await store.heartbeat(job.id, claimed.lease_id, 0.5, "")
    assert beat.lease_expire_time.timestamp() > lease_over
    assert await store.recover() == []
    assert (await store.get(TENANT, job.id)).status is JobStatus.PROCESSING
