"""Contract: submit_batch (BatchSubmit), many submits in one atomic step, all or nothing."""

from __future__ import annotations

from typing import Any

import pytest

from store import IdempotencyKeyReused, InvalidRequest, QueueFull, QuotaExceeded, Store
from store.model import GroupSpec, JobKind, JobStatus, Priority, SubmitRequest
from tests.store.conftest import MODEL, TENANT, MakeStore, claim_one, spec, submit_one


def item(key: str = "", *, tenant: str = TENANT, **fields: Any) -> SubmitRequest:
    return SubmitRequest(tenant=tenant, work=spec(**fields), idempotency_key=key)


def group_item(size: int, key: str = "", max_parallel: int = 0) -> SubmitRequest:
    children = tuple(spec(payload=f"child {i}".encode()) for i in range(size))
    return SubmitRequest(
        tenant=TENANT,
        work=GroupSpec(children=children, max_parallel=max_parallel),
        idempotency_key=key,
    )


async def depth(store: Store) -> int:
    return (await store.queue_depths()).get((MODEL, Priority.BATCH), 0)


async def test_batch_answers_one_created_job_per_item_in_request_order(store: Store) -> None:
    requests = [item(payload=f"p{i}".encode()) for i in range(5)]
    results = await store.submit_batch(requests)
    assert [result.reused for result in results] == [False] * 5
    payloads = [await store.payload(TENANT, result.job.id) for result in results]
    assert payloads == [f"p{i}".encode() for i in range(5)]
    assert all(result.job.status is JobStatus.QUEUED for result in results)


async def test_batch_items_are_claimed_in_request_order(store: Store) -> None:
    results = await store.submit_batch([item() for _ in range(3)])
    claimed = [(await claim_one(store)).job.id for _ in range(3)]
    assert claimed == [result.job.id for result in results]


async def test_batch_of_nothing_answers_nothing(store: Store) -> None:
    assert await store.submit_batch([]) == []


async def test_batch_item_reuses_an_existing_job_for_its_key(store: Store) -> None:
    existing = await store.submit(item("k1"))
    results = await store.submit_batch([item(), item("k1")])
    assert [result.reused for result in results] == [False, True]
    assert results[1].job.id == existing.job.id
    assert await depth(store) == 2


async def test_batch_item_reuses_the_job_an_earlier_item_made(store: Store) -> None:
    results = await store.submit_batch([item("k1"), item("k1")])
    assert [result.reused for result in results] == [False, True]
    assert results[0].job.id == results[1].job.id
    assert await depth(store) == 1


async def test_same_key_with_another_request_within_a_batch_names_the_later_item(
    store: Store,
) -> None:
    with pytest.raises(IdempotencyKeyReused) as refused:
        await store.submit_batch([item("k1"), item(), item("k1", payload=b"other")])
    assert refused.value.item == 2
    assert await depth(store) == 0


async def test_key_reused_against_an_existing_job_names_the_item(store: Store) -> None:
    await store.submit(item("k1"))
    with pytest.raises(IdempotencyKeyReused) as refused:
        await store.submit_batch([item(), item("k1", payload=b"other")])
    assert refused.value.item == 1


async def test_refused_batch_creates_nothing_and_takes_no_key(store: Store) -> None:
    await store.submit(item("taken"))
    with pytest.raises(IdempotencyKeyReused):
        await store.submit_batch([item("fresh"), item(), item("taken", payload=b"other")])
    assert await depth(store) == 1
    # "fresh" was not taken: the same key with another request is a new job
    result = await store.submit(item("fresh", payload=b"something else"))
    assert not result.reused
    assert await depth(store) == 2


async def test_refused_batch_leaves_the_live_counters_unchanged(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=3)
    with pytest.raises(QuotaExceeded):
        await store.submit_batch([item() for _ in range(4)])
    await store.submit_batch([item() for _ in range(3)])  # all three places are free
    with pytest.raises(QuotaExceeded):
        await submit_one(store)


async def test_tenant_cap_counts_the_batchs_earlier_items_and_names_the_item(
    make_store: MakeStore,
) -> None:
    store = await make_store(max_live_per_tenant=3)
    await submit_one(store)
    with pytest.raises(QuotaExceeded) as refused:
        await store.submit_batch([item(), item(), item()])
    assert refused.value.item == 2
    assert await depth(store) == 1


async def test_total_cap_counts_the_batchs_earlier_items_and_names_the_item(
    make_store: MakeStore,
) -> None:
    store = await make_store(max_live_total=2)
    with pytest.raises(QueueFull) as refused:
        await store.submit_batch([item(tenant="a"), item(tenant="b"), item(tenant="c")])
    assert refused.value.item == 2
    assert await depth(store) == 0


async def test_reused_items_are_not_capped(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=1)
    results = await store.submit_batch([item("k1"), item("k1"), item("k1")])
    assert [result.reused for result in results] == [False, True, True]


async def test_group_over_max_group_children_names_the_item(make_store: MakeStore) -> None:
    store = await make_store(max_group_children=2)
    with pytest.raises(InvalidRequest) as refused:
        await store.submit_batch([item(), group_item(3)])
    assert refused.value.item == 1
    assert refused.value.field == "group.children"
    assert await depth(store) == 0


async def test_groups_inside_a_batch_are_created_with_their_children(store: Store) -> None:
    results = await store.submit_batch([group_item(3, max_parallel=1), item(), group_item(2)])
    first, single, second = (result.job for result in results)
    assert (first.kind, single.kind, second.kind) == (JobKind.GROUP, JobKind.SINGLE, JobKind.GROUP)
    children = await store.list_children(TENANT, first.id)
    assert [child.status for child in children] == [
        JobStatus.QUEUED,
        JobStatus.HELD,
        JobStatus.HELD,
    ]
    assert [await store.payload(TENANT, child.id) for child in children] == [
        b"child 0",
        b"child 1",
        b"child 2",
    ]
    assert len(await store.list_children(TENANT, second.id)) == 2
    assert await depth(store) == 4  # first group's one released child, the single, two


async def test_a_group_item_counts_its_children_against_the_cap(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=4)
    with pytest.raises(QuotaExceeded) as refused:
        await store.submit_batch([group_item(3), group_item(2)])
    assert refused.value.item == 1


async def test_a_reused_group_key_within_a_batch_answers_the_same_group(store: Store) -> None:
    results = await store.submit_batch([group_item(2, "g"), group_item(2, "g")])
    assert results[1].reused
    assert results[1].job.id == results[0].job.id
    assert len(results[1].job.children) == 2


async def test_a_batch_of_a_thousand_keyed_items_is_accepted_whole(store: Store) -> None:
    requests = [item(f"k{i}", payload=f"p{i}".encode()) for i in range(1000)]
    results = await store.submit_batch(requests)
    assert len({result.job.id for result in results}) == 1000
    assert await depth(store) == 1000
    again = await store.submit_batch(requests)
    assert all(result.reused for result in again)
    assert [result.job.id for result in again] == [result.job.id for result in results]
