"""Contract: cancel of held, queued, processing and terminal jobs, and of groups."""

from __future__ import annotations

from datetime import timedelta

from store import Store
from store.model import ERROR_CANCELLED, JobStatus
from tests.helpers import assert_eventually
from tests.store.conftest import (
    MODEL,
    TENANT,
    MakeStore,
    claim_one,
    complete,
    status_of,
    submit_group,
    submit_one,
)


async def test_cancel_of_a_queued_job_ends_it_at_once(store: Store) -> None:
    job = await submit_one(store)
    result = await store.cancel(TENANT, job.id, "not needed")
    assert result.cancelled
    assert result.job.status is JobStatus.CANCELLED
    got = await store.get(TENANT, job.id)
    assert (got.status, got.error_code, got.error_message) == (
        JobStatus.CANCELLED,
        ERROR_CANCELLED,
        "not needed",
    )
    assert got.end_time is not None


async def test_a_cancelled_queued_job_is_never_claimed(store: Store) -> None:
    job = await submit_one(store)
    await store.cancel(TENANT, job.id)
    assert await store.claim("w1", [MODEL]) == []


async def test_cancel_of_a_processing_job_ends_it_at_once_with_cancel_requested(
    store: Store,
) -> None:
    job = await submit_one(store)
    await claim_one(store)
    result = await store.cancel(TENANT, job.id)
    assert result.cancelled
    got = await store.get(TENANT, job.id)
    assert got.status is JobStatus.CANCELLED
    assert got.cancel_requested


async def test_cancel_of_a_processing_job_frees_its_in_flight_slot(store: Store) -> None:
    job = await submit_one(store)
    await claim_one(store)
    await store.cancel(TENANT, job.id)
    assert (await store.in_flight()).get(MODEL, 0) == 0


async def test_cancel_of_a_terminal_job_is_not_an_error(store: Store) -> None:
    job = await submit_one(store)
    await complete(store, await claim_one(store))
    result = await store.cancel(TENANT, job.id)
    assert not result.cancelled
    assert result.job.status is JobStatus.COMPLETED


async def test_cancel_twice_reports_cancelled_only_once(store: Store) -> None:
    job = await submit_one(store)
    assert (await store.cancel(TENANT, job.id)).cancelled
    assert not (await store.cancel(TENANT, job.id)).cancelled


async def test_cancel_of_a_held_child_ends_it_and_it_is_never_claimed(store: Store) -> None:
    group = await submit_group(store, 2, max_parallel=1)
    held = group.children[1]
    assert held.status is JobStatus.HELD
    assert (await store.cancel(TENANT, held.id)).cancelled
    assert await status_of(store, held.id) is JobStatus.CANCELLED
    await complete(store, await claim_one(store))
    assert await store.claim("w1", [MODEL]) == []


async def test_cancel_of_a_group_cancels_held_and_queued_children(store: Store) -> None:
    group = await submit_group(store, 4, max_parallel=2)
    result = await store.cancel(TENANT, group.id, "batch aborted")
    assert result.cancelled
    assert result.job.status is JobStatus.CANCELLED
    children = await store.list_children(TENANT, group.id)
    assert [child.status for child in children] == [JobStatus.CANCELLED] * 4
    assert await store.claim("w1", [MODEL], max_jobs=4) == []


async def test_cancel_of_a_group_lets_running_children_finish_and_keep_results(
    store: Store,
) -> None:
    group = await submit_group(store, 3, max_parallel=2)
    running = await claim_one(store)
    await store.cancel(TENANT, group.id)
    assert await status_of(store, group.id) is JobStatus.CANCELLED
    assert await status_of(store, running.job.id) is JobStatus.PROCESSING
    beat = await store.heartbeat(running.job.id, running.lease_id, 0.5, "")
    assert not beat.cancel_requested
    done = await complete(store, running, b"kept")
    assert (done.status, done.result) == (JobStatus.COMPLETED, b"kept")
    assert await status_of(store, group.id) is JobStatus.CANCELLED
    statuses = [child.status for child in await store.list_children(TENANT, group.id)]
    assert statuses == [JobStatus.COMPLETED, JobStatus.CANCELLED, JobStatus.CANCELLED]


async def test_cancel_of_a_processing_group_sets_cancel_requested_on_the_parent(
    store: Store,
) -> None:
    group = await submit_group(store, 2)
    await claim_one(store)
    result = await store.cancel(TENANT, group.id)
    assert (result.job.status, result.job.cancel_requested) == (JobStatus.CANCELLED, True)
    assert (await store.get(TENANT, group.id)).cancel_requested


async def test_cancel_of_a_queued_group_does_not_set_cancel_requested(store: Store) -> None:
    group = await submit_group(store, 2)
    result = await store.cancel(TENANT, group.id)
    assert not result.job.cancel_requested


async def test_a_running_child_of_a_cancelled_group_is_not_retried(store: Store) -> None:
    # It may finish its attempt, but a retry would queue work for a group
    # that is cancelled: the child ends CANCELLED instead.
    group = await submit_group(store, 2, max_attempts=3)
    running = await claim_one(store)
    await store.cancel(TENANT, group.id)
    ended = await store.set_result(
        running.job.id, running.lease_id, JobStatus.FAILED, error_code="OOM", retryable=True
    )
    assert (ended.status, ended.error_code) == (JobStatus.CANCELLED, ERROR_CANCELLED)
    assert await store.claim("w1", [MODEL]) == []
    assert await status_of(store, group.id) is JobStatus.CANCELLED


async def test_an_expired_lease_of_a_cancelled_groups_child_is_not_requeued(
    make_store: MakeStore,
) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=0.05))
    group = await submit_group(store, 2, max_attempts=3)
    running = await claim_one(store)
    await store.cancel(TENANT, group.id)

    async def ended() -> bool:
        await store.recover()
        return await status_of(store, running.job.id) is JobStatus.CANCELLED

    await assert_eventually(ended, timeout=10)
    assert await store.claim("w1", [MODEL]) == []


async def test_cancel_of_a_finished_group_is_not_an_error(store: Store) -> None:
    group = await submit_group(store, 1)
    await complete(store, await claim_one(store))
    result = await store.cancel(TENANT, group.id)
    assert not result.cancelled
    assert result.job.status is JobStatus.COMPLETED


async def test_cancelling_a_queued_child_releases_the_next_held_child(store: Store) -> None:
    group = await submit_group(store, 3, max_parallel=1)
    await store.cancel(TENANT, group.children[0].id)
    statuses = [child.status for child in await store.list_children(TENANT, group.id)]
    assert statuses == [JobStatus.CANCELLED, JobStatus.QUEUED, JobStatus.HELD]
    assert (await claim_one(store)).job.child_index == 1


async def test_cancelling_a_running_child_releases_the_next_held_child(store: Store) -> None:
    group = await submit_group(store, 2, max_parallel=1)
    running = await claim_one(store)
    await store.cancel(TENANT, running.job.id)
    assert (await claim_one(store)).job.child_index == 1
    assert await status_of(store, group.id) is JobStatus.PROCESSING
