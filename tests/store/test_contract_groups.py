"""Contract: groups — held children, max_parallel, parent status and progress."""

from __future__ import annotations

import pytest

from store import Store
from store.model import JobKind, JobStatus, Priority
from tests.store.conftest import (
    MODEL,
    TENANT,
    claim_one,
    complete,
    status_of,
    submit_group,
)


async def fail(store: Store, job_id: str, lease_id: str) -> None:
    await store.set_result(job_id, lease_id, JobStatus.FAILED, error_code="HANDLER_ERROR")


async def test_group_parent_starts_queued_with_children_in_index_order(store: Store) -> None:
    group = await submit_group(store, 3)
    assert group.kind is JobKind.GROUP
    assert group.status is JobStatus.QUEUED
    assert [child.child_index for child in group.children] == [0, 1, 2]
    children = await store.list_children(TENANT, group.id)
    assert [child.kind for child in children] == [JobKind.CHILD] * 3
    assert {child.parent_id for child in children} == {group.id}
    assert [child.child_index for child in children] == [0, 1, 2]


async def test_children_without_a_cap_are_all_queued(store: Store) -> None:
    group = await submit_group(store, 3, max_parallel=0)
    assert [child.status for child in group.children] == [JobStatus.QUEUED] * 3


async def test_children_beyond_max_parallel_are_held(store: Store) -> None:
    group = await submit_group(store, 4, max_parallel=2)
    assert [child.status for child in group.children] == [
        JobStatus.QUEUED,
        JobStatus.QUEUED,
        JobStatus.HELD,
        JobStatus.HELD,
    ]
    assert len(await store.claim("w1", [MODEL], max_jobs=4)) == 2


async def test_a_finished_child_releases_the_next_held_child(store: Store) -> None:
    group = await submit_group(store, 3, max_parallel=2)
    first = await claim_one(store)
    assert first.job.child_index == 0
    await complete(store, first)
    statuses = [child.status for child in await store.list_children(TENANT, group.id)]
    assert statuses == [JobStatus.COMPLETED, JobStatus.QUEUED, JobStatus.QUEUED]


async def test_max_parallel_two_never_runs_more_than_two(store: Store) -> None:
    group = await submit_group(store, 5, max_parallel=2)
    done = 0
    while done < 5:
        children = await store.list_children(TENANT, group.id)
        active = [c for c in children if c.status in (JobStatus.QUEUED, JobStatus.PROCESSING)]
        assert len(active) <= 2
        await complete(store, await claim_one(store))
        done += 1
    assert await status_of(store, group.id) is JobStatus.COMPLETED


async def test_max_parallel_one_runs_children_strictly_in_index_order(store: Store) -> None:
    group = await submit_group(store, 4, max_parallel=1)
    order = []
    for _ in range(4):
        claimed = await store.claim("w1", [MODEL], max_jobs=4)
        assert len(claimed) == 1
        order.append(claimed[0].job.child_index)
        await complete(store, claimed[0])
    assert order == [0, 1, 2, 3]
    assert await status_of(store, group.id) is JobStatus.COMPLETED


async def test_parent_turns_processing_when_a_child_starts(store: Store) -> None:
    group = await submit_group(store, 2)
    await claim_one(store)
    parent = await store.get(TENANT, group.id)
    assert parent.status is JobStatus.PROCESSING
    assert parent.start_time is not None


async def test_parent_progress_is_the_fraction_of_terminal_children(store: Store) -> None:
    group = await submit_group(store, 4)
    claimed = await store.claim("w1", [MODEL], max_jobs=4)
    await complete(store, claimed[0])
    assert (await store.get(TENANT, group.id)).progress == pytest.approx(0.25)
    await fail(store, claimed[1].job.id, claimed[1].lease_id)
    assert (await store.get(TENANT, group.id)).progress == pytest.approx(0.5)


async def test_parent_completes_when_every_child_completed(store: Store) -> None:
    group = await submit_group(store, 2)
    for claimed in await store.claim("w1", [MODEL], max_jobs=2):
        await complete(store, claimed)
    parent = await store.get(TENANT, group.id)
    assert parent.status is JobStatus.COMPLETED
    assert parent.progress == pytest.approx(1.0)
    assert parent.end_time is not None


async def test_parent_fails_when_no_child_completed(store: Store) -> None:
    group = await submit_group(store, 2)
    for claimed in await store.claim("w1", [MODEL], max_jobs=2):
        await fail(store, claimed.job.id, claimed.lease_id)
    assert await status_of(store, group.id) is JobStatus.FAILED


async def test_parent_is_partial_when_some_children_completed(store: Store) -> None:
    group = await submit_group(store, 2)
    first, second = await store.claim("w1", [MODEL], max_jobs=2)
    await complete(store, first)
    await fail(store, second.job.id, second.lease_id)
    assert await status_of(store, group.id) is JobStatus.PARTIAL


async def test_parent_final_status_is_reached_exactly_once(store: Store) -> None:
    group = await submit_group(store, 3)
    for claimed in await store.claim("w1", [MODEL], max_jobs=3):
        await complete(store, claimed)
    parent_events = [e for e in await store.events(count=1000) if e.job_id == group.id]
    assert [(e.from_status, e.to_status) for e in parent_events] == [
        (None, JobStatus.QUEUED),
        (JobStatus.QUEUED, JobStatus.PROCESSING),
        (JobStatus.PROCESSING, JobStatus.COMPLETED),
    ]


async def test_a_failing_child_does_not_cancel_its_siblings(store: Store) -> None:
    group = await submit_group(store, 3, max_parallel=2)
    first, second = await store.claim("w1", [MODEL], max_jobs=2)
    await fail(store, first.job.id, first.lease_id)
    statuses = [child.status for child in await store.list_children(TENANT, group.id)]
    assert statuses == [JobStatus.FAILED, JobStatus.PROCESSING, JobStatus.QUEUED]
    await complete(store, second)
    await complete(store, await claim_one(store))
    assert await status_of(store, group.id) is JobStatus.PARTIAL


async def test_child_keys_are_the_parent_key_and_index(store: Store) -> None:
    group = await submit_group(store, 2, key="batch-7")
    children = await store.list_children(TENANT, group.id)
    assert [child.idempotency_key for child in children] == ["batch-7#0", "batch-7#1"]


async def test_children_share_the_parents_priority(store: Store) -> None:
    group = await submit_group(store, 2, priority=Priority.INTERACTIVE)
    children = await store.list_children(TENANT, group.id)
    assert {child.priority for child in children} == {Priority.INTERACTIVE}


async def test_children_carry_their_own_payloads(store: Store) -> None:
    group = await submit_group(store, 2)
    claimed = await store.claim("w1", [MODEL], max_jobs=2)
    assert [c.payload for c in claimed] == [b"child 0", b"child 1"]
    assert await store.payload(TENANT, group.children[1].id) == b"child 1"


async def test_list_children_of_a_single_job_is_empty(store: Store) -> None:
    group = await submit_group(store, 1)
    assert await store.list_children(TENANT, group.children[0].id) == []


async def test_a_reused_group_key_returns_the_same_group(store: Store) -> None:
    first = await submit_group(store, 2, key="g")
    again = await submit_group(store, 2, key="g")
    assert again.id == first.id
    assert len(await store.claim("w1", [MODEL], max_jobs=4)) == 2
