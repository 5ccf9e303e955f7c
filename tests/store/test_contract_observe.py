"""Contract: queue position, watch and the audit event stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta

import pytest

from store import JobNotFound, Store
from store.model import Job, JobStatus, Priority
from tests.store.conftest import (
    MODEL,
    TENANT,
    MakeStore,
    claim_one,
    complete,
    partitions_of,
    submit_group,
    submit_one,
)

# -- queue position -------------------------------------------------------------


async def test_queue_position_counts_jobs_claimed_before(store: Store) -> None:
    jobs = [await submit_one(store) for _ in range(3)]
    assert [(await store.get(TENANT, job.id)).queue_position for job in jobs] == [0, 1, 2]


async def test_queue_position_counts_higher_priorities_first(store: Store) -> None:
    batch = await submit_one(store, priority=Priority.BATCH)
    await submit_one(store, priority=Priority.SYSTEM)
    await submit_one(store, priority=Priority.INTERACTIVE)
    interactive = await submit_one(store, priority=Priority.INTERACTIVE)
    assert (await store.get(TENANT, batch.id)).queue_position == 3
    assert (await store.get(TENANT, interactive.id)).queue_position == 1


async def test_queue_position_ignores_other_models(store: Store) -> None:
    await submit_one(store, model="other")
    job = await submit_one(store)
    assert (await store.get(TENANT, job.id)).queue_position == 0


async def test_queue_position_moves_up_as_jobs_are_claimed(store: Store) -> None:
    await submit_one(store)
    job = await submit_one(store)
    await claim_one(store)
    assert (await store.get(TENANT, job.id)).queue_position == 0


async def test_queue_position_is_none_unless_queued(store: Store) -> None:
    job = await submit_one(store)
    await claim_one(store)
    assert (await store.get(TENANT, job.id)).queue_position is None
    assert (await store.get(TENANT, job.id)).queue_position is None


# -- watch ----------------------------------------------------------------------------


async def next_snapshot(stream: AsyncIterator[Job]) -> Job:
    return await asyncio.wait_for(anext(stream), timeout=5)


async def stop(stream: AsyncIterator[Job]) -> None:
    """Close a watch the way a server does when its client goes away."""
    if isinstance(stream, AsyncGenerator):
        await stream.aclose()


async def test_watch_yields_the_current_snapshot_first(store: Store) -> None:
    job = await submit_one(store)
    stream = store.watch(TENANT, job.id)
    first = await next_snapshot(stream)
    assert (first.id, first.status, first.queue_position) == (job.id, JobStatus.QUEUED, 0)
    await stop(stream)


async def test_watch_yields_one_snapshot_per_change_and_ends_after_terminal(
    store: Store,
) -> None:
    job = await submit_one(store)
    stream = store.watch(TENANT, job.id)
    assert (await next_snapshot(stream)).status is JobStatus.QUEUED
    claimed = await claim_one(store)
    assert (await next_snapshot(stream)).status is JobStatus.PROCESSING
    await store.heartbeat(job.id, claimed.lease_id, 0.5, "resizing")
    beat = await next_snapshot(stream)
    assert (beat.progress, beat.stage) == (0.5, "resizing")
    await complete(store, claimed)
    assert (await next_snapshot(stream)).status is JobStatus.COMPLETED
    with pytest.raises(StopAsyncIteration):
        await next_snapshot(stream)


async def test_watch_reports_queue_position_changes(store: Store) -> None:
    await submit_one(store)
    job = await submit_one(store)
    stream = store.watch(TENANT, job.id)
    assert (await next_snapshot(stream)).queue_position == 1
    await claim_one(store)
    assert (await next_snapshot(stream)).queue_position == 0
    await stop(stream)


async def test_watch_skips_heartbeats_that_change_nothing(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    stream = store.watch(TENANT, job.id)
    await next_snapshot(stream)
    await store.heartbeat(job.id, claimed.lease_id, 0.0, "")
    await store.heartbeat(job.id, claimed.lease_id, 0.3, "")
    assert (await next_snapshot(stream)).progress == 0.3
    await stop(stream)


async def test_watch_of_a_terminal_job_yields_once_and_ends(store: Store) -> None:
    job = await submit_one(store)
    await store.cancel(TENANT, job.id)
    snapshots = [snapshot async for snapshot in store.watch(TENANT, job.id)]
    assert [s.status for s in snapshots] == [JobStatus.CANCELLED]


async def test_watch_of_an_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await anext(store.watch(TENANT, "01J00000000000000000000000"))


async def test_watch_of_a_group_reports_child_changes(store: Store) -> None:
    group = await submit_group(store, 2, max_parallel=1)
    stream = store.watch(TENANT, group.id)
    await next_snapshot(stream)
    first = await claim_one(store)
    started = await next_snapshot(stream)
    assert started.status is JobStatus.PROCESSING
    await complete(store, first)
    released = await next_snapshot(stream)
    assert [c.status for c in released.children] == [JobStatus.COMPLETED, JobStatus.QUEUED]
    await stop(stream)


# -- events -------------------------------------------------------------------------------


async def test_every_transition_appends_an_event(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store, worker="gpu-1")
    await complete(store, claimed)
    events = [e for e in await store.events(count=100) if e.job_id == job.id]
    assert [(e.from_status, e.to_status) for e in events] == [
        (None, JobStatus.QUEUED),
        (JobStatus.QUEUED, JobStatus.PROCESSING),
        (JobStatus.PROCESSING, JobStatus.COMPLETED),
    ]
    claim_event = events[1]
    assert (claim_event.tenant, claim_event.model, claim_event.priority) == (
        TENANT,
        MODEL,
        Priority.BATCH,
    )
    assert (claim_event.attempts, claim_event.worker_id) == (1, "gpu-1")
    assert claim_event.parent_job_id == ""
    assert abs(claim_event.time.timestamp() - time.time()) < 60


async def test_child_events_name_their_parent(store: Store) -> None:
    group = await submit_group(store, 1)
    child = group.children[0]
    events = [e for e in await store.events(count=100) if e.job_id == child.id]
    assert events
    assert {e.parent_job_id for e in events} == {group.id}


async def test_failure_events_carry_the_error_code(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.set_result(job.id, claimed.lease_id, JobStatus.FAILED, error_code="BAD_INPUT")
    last = (await store.events(count=100))[-1]
    assert (last.job_id, last.to_status, last.error_code) == (
        job.id,
        JobStatus.FAILED,
        "BAD_INPUT",
    )


async def test_events_read_on_from_a_position(store: Store) -> None:
    first = await submit_one(store)
    seen = await store.events(count=100)
    second = await submit_one(store)
    newer = await store.events(after=seen[-1].id, count=100)
    assert [e.job_id for e in seen] == [first.id]
    assert [e.job_id for e in newer] == [second.id]


async def test_events_respect_count(store: Store) -> None:
    for _ in range(5):
        await submit_one(store)
    assert len(await store.events(count=3)) == 3


async def test_events_block_until_a_new_event(store: Store) -> None:
    await submit_one(store)
    position = (await store.events(count=100))[-1].id
    # Nothing new: the read waits out its block (measured, not slept for) ...
    started = time.monotonic()
    assert await store.events(after=position, block=timedelta(seconds=0.2)) == []
    assert time.monotonic() - started >= 0.15
    # ... and a new event ends a long block well before it runs out.
    reader = asyncio.create_task(store.events(after=position, block=timedelta(seconds=10)))
    job = await submit_one(store)
    events = await asyncio.wait_for(reader, timeout=5)
    assert [e.job_id for e in events] == [job.id]


async def test_events_block_returns_empty_when_nothing_comes(store: Store) -> None:
    await submit_one(store)
    position = (await store.events(count=100))[-1].id
    assert await store.events(after=position, block=timedelta(seconds=0.2)) == []


async def test_event_stream_is_capped(make_store: MakeStore) -> None:
    store = await make_store(events_max_length=20)
    # Redis trims approximately, in whole stream nodes, and each partition's
    # stream on its own: the bound scales with the partitions.
    scale = partitions_of(store)
    for _ in range(150 * scale):
        job = await submit_one(store)
        await store.cancel(TENANT, job.id)
    events = await store.events(count=10_000)
    # 300 transitions (per partition) were appended; the stream keeps about the
    # cap, always the newest ones.
    assert 20 <= len(events) <= 150 * scale
    assert (events[-1].job_id, events[-1].to_status) == (job.id, JobStatus.CANCELLED)


async def test_newest_event_id_is_zero_without_events(store: Store) -> None:
    assert await store.newest_event_id() == "0"


async def test_newest_event_id_is_the_last_events_position(store: Store) -> None:
    for _ in range(3):
        await submit_one(store)
    everything = await store.events(count=1000)
    assert await store.newest_event_id() == everything[-1].id


async def test_events_after_the_newest_id_are_only_later_ones(store: Store) -> None:
    await submit_one(store)
    newest = await store.newest_event_id()
    later = await submit_one(store)
    assert [e.job_id for e in await store.events(after=newest)] == [later.id]


async def test_newest_event_id_survives_the_cap(make_store: MakeStore) -> None:
    store = await make_store(events_max_length=20)
    for _ in range(150):
        job = await submit_one(store)
        await store.cancel(TENANT, job.id)
    newest = (await store.events(count=10_000))[-1]
    assert (await store.newest_event_id(), newest.job_id) == (newest.id, job.id)
