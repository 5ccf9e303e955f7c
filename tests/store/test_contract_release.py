"""release: a lease nobody received goes back at once, as if the claim never happened."""

from __future__ import annotations

import pytest

from store import Store
from store.errors import LeaseLost
from store.model import JobStatus
from tests.store.conftest import MODEL, TENANT, claim_one, submit_group, submit_one


async def test_a_released_job_is_queued_again_with_its_attempts_restored(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    assert await store.release([claimed]) == 1
    after = await store.get(TENANT, job.id)
    assert (after.status, after.attempts) == (JobStatus.QUEUED, 0)


async def test_a_released_job_is_claimed_next_at_its_original_place(store: Store) -> None:
    first = await submit_one(store)
    await submit_one(store)
    claimed = await claim_one(store)
    await store.release([claimed])
    assert (await store.get(TENANT, first.id)).queue_position == 0
    again = await claim_one(store)
    assert (again.job.id, again.job.attempts) == (first.id, 1)


async def test_a_released_lease_is_dead(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store)
    await store.release([claimed])
    with pytest.raises(LeaseLost):
        await store.heartbeat(claimed.job.id, claimed.lease_id, 0.5, "")


async def test_a_release_frees_the_in_flight_count(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store)
    await store.release([claimed])
    assert (await store.in_flight()).get(MODEL, 0) == 0


async def test_a_release_is_audited_as_processing_to_queued(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.release([claimed])
    events = [event for event in await store.events() if event.job_id == job.id]
    last = events[-1]
    assert (last.from_status, last.to_status, last.attempts) == (
        JobStatus.PROCESSING,
        JobStatus.QUEUED,
        0,
    )


async def test_a_release_repeated_changes_nothing(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.release([claimed])
    assert await store.release([claimed]) == 0
    assert (await store.get(TENANT, job.id)).attempts == 0


async def test_a_lease_that_ended_is_not_released(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.set_result(job.id, claimed.lease_id, JobStatus.COMPLETED, b"done")
    assert await store.release([claimed]) == 0
    assert (await store.get(TENANT, job.id)).status is JobStatus.COMPLETED


async def test_a_released_child_of_a_cancelled_group_ends_cancelled(store: Store) -> None:
    group = await submit_group(store, 2)
    claimed = await claim_one(store)
    await store.cancel(TENANT, group.id)
    await store.release([claimed])
    assert (await store.get(TENANT, claimed.job.id)).status is JobStatus.CANCELLED
