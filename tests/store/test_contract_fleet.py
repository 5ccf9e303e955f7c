"""Contract: the worker registry, ListWorkers' read, the queue statistics and KEDA's demand."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from store import Store
from store.model import Priority, QueueStats, StoreSettings, WorkerSighting
from store.workers import LISTED_FOR, retention
from tests.helpers import assert_eventually
from tests.store.conftest import (
    MODEL,
    TENANT,
    MakeStore,
    claim_one,
    complete,
    submit_one,
)

CLOCK_SLACK = timedelta(seconds=5)  # the store's clock against this process's


def seen(
    worker_id: str, age: float = 0.0, pool: str | None = "gpu", *models: str
) -> WorkerSighting:
    return WorkerSighting(worker_id, timedelta(seconds=age), pool, models or (MODEL,))


async def listed(store: Store) -> list[str]:
    return [worker.worker_id for worker in await store.list_workers()]


# -- the registry ---------------------------------------------------------------


async def test_a_recorded_worker_is_listed_with_its_pool_and_models(store: Store) -> None:
    await store.record_workers([seen("w1", 0, "gpu-a", "m1", "m2")])
    [worker] = await store.list_workers()
    assert (worker.worker_id, worker.pool, worker.models, worker.job_ids) == (
        "w1",
        "gpu-a",
        ("m1", "m2"),
        (),
    )
    assert abs(worker.last_seen_time - datetime.now(UTC)) < CLOCK_SLACK


async def test_workers_are_listed_most_recently_seen_first(store: Store) -> None:
    await store.record_workers([seen("old", 30), seen("new", 1), seen("middle", 10)])
    assert await listed(store) == ["new", "middle", "old"]


async def test_the_age_of_a_sighting_sets_its_last_seen_time(store: Store) -> None:
    await store.record_workers([seen("w1", 0), seen("w2", 60)])
    first, second = await store.list_workers()
    gap = first.last_seen_time - second.last_seen_time
    assert timedelta(seconds=59) < gap < timedelta(seconds=61)


async def test_a_sighting_without_a_pool_keeps_the_recorded_pool_and_models(
    store: Store,
) -> None:
    await store.record_workers([seen("w1", 5, "gpu-a", "m1")])
    await store.record_workers([WorkerSighting("w1")])
    [worker] = await store.list_workers()
    assert (worker.pool, worker.models) == ("gpu-a", ("m1",))


async def test_a_later_sighting_with_a_pool_replaces_the_pool_and_models(store: Store) -> None:
    await store.record_workers([seen("w1", 5, "gpu-a", "m1")])
    await store.record_workers([seen("w1", 0, "gpu-b", "m2")])
    [worker] = await store.list_workers()
    assert (worker.pool, worker.models) == ("gpu-b", ("m2",))


async def test_an_older_sighting_never_moves_last_seen_back(store: Store) -> None:
    await store.record_workers([seen("w1", 0)])
    [before] = await store.list_workers()
    await store.record_workers([seen("w1", 60)])
    [after] = await store.list_workers()
    assert after.last_seen_time >= before.last_seen_time


async def test_a_worker_silent_for_120_s_without_a_lease_is_not_listed(store: Store) -> None:
    silent = LISTED_FOR.total_seconds() + 1
    await store.record_workers([seen("silent", silent), seen("recent", 0)])
    assert await listed(store) == ["recent"]


async def test_a_worker_of_a_sighting_without_a_pool_alone_is_listed_with_no_pool(
    store: Store,
) -> None:
    await store.record_workers([WorkerSighting("w1")])
    [worker] = await store.list_workers()
    assert (worker.worker_id, worker.pool, worker.models) == ("w1", "", ())


async def test_an_empty_registry_lists_no_worker(store: Store) -> None:
    await store.record_workers([])
    assert await store.list_workers() == []


# -- leases ---------------------------------------------------------------------


async def test_a_worker_lists_the_jobs_it_holds_live_leases_on(store: Store) -> None:
    jobs = sorted([(await submit_one(store)).id for _ in range(2)])
    await store.record_workers([seen("w1")])
    await store.claim("w1", [MODEL], max_jobs=2)
    [worker] = await store.list_workers()
    assert worker.job_ids == tuple(jobs)


async def test_a_finished_job_is_no_longer_held(store: Store) -> None:
    await submit_one(store)
    await store.record_workers([seen("w1")])
    await complete(store, await claim_one(store, worker="w1"))
    [worker] = await store.list_workers()
    assert worker.job_ids == ()


async def test_a_worker_holding_a_lease_is_listed_though_silent_for_120_s(
    store: Store,
) -> None:
    job = await submit_one(store)
    await claim_one(store, worker="w1")
    await store.record_workers([seen("w1", LISTED_FOR.total_seconds() + 5, "gpu-a")])
    [worker] = await store.list_workers()
    assert (worker.worker_id, worker.pool, worker.job_ids) == ("w1", "gpu-a", (job.id,))


async def test_a_lease_counts_as_a_sighting_at_its_claim(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store, worker="w1")
    [worker] = await store.list_workers()
    assert worker.job_ids == (claimed.job.id,)
    assert claimed.job.start_time is not None
    assert abs(worker.last_seen_time - claimed.job.start_time) < timedelta(milliseconds=5)


async def test_a_worker_known_only_by_its_lease_has_no_pool(store: Store) -> None:
    await submit_one(store)
    await claim_one(store, worker="w1")
    [worker] = await store.list_workers()
    assert (worker.worker_id, worker.pool, worker.models) == ("w1", "", ())


async def test_an_expired_lease_is_not_held(make_store: MakeStore) -> None:
    store = await make_store(lease_timeout=timedelta(milliseconds=100))
    await submit_one(store)
    await store.record_workers([seen("w1", LISTED_FOR.total_seconds() + 5)])
    await claim_one(store, worker="w1")

    async def gone() -> bool:
        return await store.list_workers() == []

    await assert_eventually(gone, message="an expired lease still lists its worker")


async def test_an_entry_past_its_retention_is_forgotten(store: Store) -> None:
    await submit_one(store)
    await claim_one(store, worker="w1")
    past = retention(StoreSettings()).total_seconds() + 5
    await store.record_workers([seen("w1", past, "gpu-a")])
    await store.record_workers([seen("someone-else")])  # a write trims the registry
    by_id = {worker.worker_id: worker for worker in await store.list_workers()}
    assert by_id["w1"].pool == ""  # listed for its lease; its entry is gone


async def test_a_heartbeat_answers_the_lease_s_worker(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store, worker="w7")
    beat = await store.heartbeat(claimed.job.id, claimed.lease_id, 0.5, "")
    assert beat.worker_id == "w7"


async def test_a_heartbeat_of_a_cancelled_job_still_answers_its_worker(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store, worker="w7")
    await store.cancel(TENANT, job.id)
    beat = await store.heartbeat(claimed.job.id, claimed.lease_id, 0.5, "")
    assert (beat.cancel_requested, beat.worker_id) == (True, "w7")


# -- queue statistics -----------------------------------------------------------


def counts(stats: list[QueueStats]) -> list[tuple[str, Priority, str, int, int]]:
    return [(s.model, s.priority, s.pool, s.queued, s.processing) for s in stats]


async def test_queue_stats_count_queued_and_processing_per_model_and_priority(
    store: Store,
) -> None:
    for _ in range(3):
        await submit_one(store)
    await submit_one(store, priority=Priority.INTERACTIVE)
    await submit_one(store, model="other")
    await claim_one(store, models=["other"])
    await claim_one(store)  # the interactive one
    await claim_one(store)
    assert counts(await store.queue_stats()) == [
        (MODEL, Priority.INTERACTIVE, "", 0, 1),
        (MODEL, Priority.BATCH, "", 2, 1),
        ("other", Priority.BATCH, "", 0, 1),
    ]


async def test_queue_stats_leave_out_queues_with_nothing_live(store: Store) -> None:
    await submit_one(store)
    await complete(store, await claim_one(store))
    assert await store.queue_stats() == []


async def test_oldest_queued_time_is_when_the_longest_waiting_job_became_queued(
    store: Store,
) -> None:
    head = await submit_one(store)
    waiting = await submit_one(store)

    async def requeued_later() -> bool:
        # released, the head goes back to its place, QUEUED again from now
        await store.release([await claim_one(store)])
        again = await store.get(TENANT, head.id)
        return again.update_time > (await store.get(TENANT, waiting.id)).update_time

    await assert_eventually(requeued_later, message="the store's clock did not move")
    [stats] = await store.queue_stats()
    assert stats.oldest_queued_time == (await store.get(TENANT, waiting.id)).update_time


async def test_oldest_queued_time_is_unset_with_only_processing_jobs(store: Store) -> None:
    await submit_one(store)
    await claim_one(store)
    [stats] = await store.queue_stats()
    assert (stats.processing, stats.oldest_queued_time) == (1, None)


# -- demand (KEDA's metric) -------------------------------------------------------


async def test_demand_counts_queued_and_processing_jobs_of_the_model(store: Store) -> None:
    for _ in range(3):
        await submit_one(store)
    await submit_one(store, priority=Priority.INTERACTIVE)
    await submit_one(store, model="other")
    await claim_one(store)
    assert await store.demand(MODEL, None) == 4
    assert await store.demand(MODEL, "gpu") == 4  # every job here may run in any pool


async def test_demand_is_zero_once_every_job_ended(store: Store) -> None:
    await submit_one(store)
    await complete(store, await claim_one(store))
    assert await store.demand(MODEL, None) == 0


async def test_demand_of_an_unknown_model_is_zero(store: Store) -> None:
    assert await store.demand("never-submitted", None) == 0


# -- listening for a model's changes ---------------------------------------------


async def test_a_submit_wakes_a_listener_of_its_model(store: Store) -> None:
    with store.listen_model(MODEL) as listener:
        listener.clear()
        await submit_one(store)
        await asyncio.wait_for(listener.wait(30), 5)
        assert await store.demand(MODEL, None) == 1


async def test_every_change_wakes_on_a_running_job_s_end(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store)
    with store.listen_model(MODEL, every_change=True) as listener:
        listener.clear()
        await complete(store, claimed)
        await asyncio.wait_for(listener.wait(30), 5)
