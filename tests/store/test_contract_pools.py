"""Placement on every store: a worker serving pool P gets jobs bound to P or to any pool.

DESIGN, "Placement (worker pools)". The gateway binds each job's pool at
submit (serving/placement.py); the store keeps one ready queue per model,
priority and pool, and a claim for P reads only P's queues and the any-pool
ones, so a job bound to another pool is never in reach of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from store import Store
from store.model import GroupSpec, JobStatus, Priority, ResultReport, SubmitRequest
from tests.store.conftest import MODEL, TENANT, MakeStore, spec, submit_one


async def _claim_all(store: Store, pool: str, models: Sequence[str] = (MODEL,)) -> list[str]:
    claimed = await store.claim("w1", models, max_jobs=64, pool=pool)
    return [c.job.id for c in claimed]


async def test_a_pools_worker_gets_its_pools_jobs_and_any_pools_never_anothers(
    store: Store,
) -> None:
    onprem = await submit_one(store, pool="onprem")
    anywhere = await submit_one(store)
    cloud = await submit_one(store, pool="cloud")
    assert set(await _claim_all(store, "onprem")) == {onprem.id, anywhere.id}
    assert await _claim_all(store, "other") == []
    assert await _claim_all(store, "cloud") == [cloud.id]


async def test_a_claim_naming_no_pool_takes_only_any_pool_jobs(store: Store) -> None:
    await submit_one(store, pool="onprem")
    anywhere = await submit_one(store)
    assert await _claim_all(store, "") == [anywhere.id]


async def test_a_pools_queue_and_the_any_pool_queue_are_claimed_in_one_order(
    make_store: MakeStore,
) -> None:
    store = await make_store(fair_share=False)
    jobs = [await submit_one(store, pool="onprem" if i % 2 else "") for i in range(6)]
    claimed = [(await store.claim("w1", [MODEL], pool="onprem"))[0].job.id for _ in range(6)]
    assert claimed == [job.id for job in jobs]


async def test_the_job_records_the_pool_it_is_bound_to(store: Store) -> None:
    job = await submit_one(store, pool="onprem")
    assert job.pool == "onprem"
    assert (await store.get(TENANT, job.id)).pool == "onprem"
    assert (await submit_one(store)).pool == ""


async def test_a_pool_jobs_position_counts_its_pools_and_the_any_pool_jobs_ahead(
    make_store: MakeStore,
) -> None:
    store = await make_store(fair_share=False)
    await submit_one(store, pool="onprem")
    await submit_one(store, pool="cloud")
    await submit_one(store)
    onprem = await submit_one(store, pool="onprem")
    anywhere = await submit_one(store)
    assert (await store.get(TENANT, onprem.id)).queue_position == 2  # onprem + any ahead
    assert (await store.get(TENANT, anywhere.id)).queue_position == 1  # any ahead only


async def test_a_higher_priority_in_the_any_pool_queue_is_claimed_first(store: Store) -> None:
    await submit_one(store, pool="onprem")
    urgent = await submit_one(store, priority=Priority.INTERACTIVE)
    assert (await store.claim("w1", [MODEL], pool="onprem"))[0].job.id == urgent.id


async def test_a_groups_children_run_only_in_their_pool(store: Store) -> None:
    children = tuple(spec(pool="onprem") for _ in range(3))
    group = (await store.submit(SubmitRequest(TENANT, GroupSpec(children)))).job
    assert group.pool == "onprem"
    assert await _claim_all(store, "cloud") == []
    assert len(await _claim_all(store, "onprem")) == 3


async def test_a_released_group_child_stays_in_its_pool(store: Store) -> None:
    children = tuple(spec(pool="onprem") for _ in range(2))
    await store.submit(SubmitRequest(TENANT, GroupSpec(children, max_parallel=1)))
    [first] = await store.claim("w1", [MODEL], pool="onprem")
    await store.record_result(first.job.id, first.lease_id, ResultReport(JobStatus.COMPLETED))
    assert await _claim_all(store, "cloud") == []
    assert len(await _claim_all(store, "onprem")) == 1


async def test_report_and_claim_takes_only_its_pools_jobs(store: Store) -> None:
    await submit_one(store, pool="cloud")
    onprem = await submit_one(store, pool="onprem")
    step = await store.report_and_claim("w1", [MODEL], [], 8, pool="onprem")
    assert [c.job.id for c in step.claimed] == [onprem.id]


async def test_a_job_given_back_stays_in_its_pool(store: Store) -> None:
    job = await submit_one(store, pool="onprem")
    [claimed] = await store.claim("w1", [MODEL], pool="onprem")
    assert await store.release([claimed]) == 1
    assert await _claim_all(store, "cloud") == []
    assert await _claim_all(store, "onprem") == [job.id]


async def test_ready_counts_are_kept_per_pool(store: Store) -> None:
    await submit_one(store, pool="onprem")
    await submit_one(store, pool="onprem")
    await submit_one(store)
    counts = {key: n for key, n in (await store.ready_counts()).items() if n}
    assert counts == {(MODEL, Priority.BATCH, "onprem"): 2, (MODEL, Priority.BATCH, ""): 1}
    assert (await store.queue_depths())[(MODEL, Priority.BATCH)] == 3


async def test_queue_stats_count_each_pool_apart(store: Store) -> None:
    await submit_one(store, pool="onprem")
    await submit_one(store, pool="onprem")
    await submit_one(store)
    await store.claim("w1", [MODEL], pool="onprem")  # the oldest: an onprem job
    stats = {(s.pool, s.queued, s.processing) for s in await store.queue_stats()}
    assert stats == {("onprem", 1, 1), ("", 1, 0)}


async def test_demand_counts_what_a_pools_workers_could_take(store: Store) -> None:
    await submit_one(store, pool="onprem")
    await submit_one(store, pool="cloud")
    await submit_one(store)
    await store.claim("w1", [MODEL], pool="cloud")
    assert await store.demand(MODEL, "onprem") == 2  # its own job and the any-pool one
    assert await store.demand(MODEL, "cloud") == 2  # its running job and the any-pool one
    assert await store.demand(MODEL, "gpu") == 1  # only the any-pool job
    assert await store.demand(MODEL, None) == 3


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_a_watch_of_a_pool_job_sees_a_job_of_its_pool_queued_ahead(store: Store) -> None:
    job = await submit_one(store, pool="onprem")
    stream = store.watch(TENANT, job.id)
    assert (await asyncio.wait_for(anext(stream), 5)).queue_position == 0
    await submit_one(store, pool="onprem", priority=Priority.INTERACTIVE)
    assert (await asyncio.wait_for(anext(stream), 5)).queue_position == 1
    await stream.aclose()  # type: ignore[attr-defined]


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_a_watch_of_a_pool_job_sees_an_any_pool_job_queued_ahead(store: Store) -> None:
    job = await submit_one(store, pool="onprem")
    stream = store.watch(TENANT, job.id)
    assert (await asyncio.wait_for(anext(stream), 5)).queue_position == 0
    await submit_one(store, priority=Priority.INTERACTIVE)
    assert (await asyncio.wait_for(anext(stream), 5)).queue_position == 1
    await stream.aclose()  # type: ignore[attr-defined]
