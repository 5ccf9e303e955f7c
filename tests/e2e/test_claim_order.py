"""Claim order and queue position (DESIGN: Priority, Job.queue_position)."""

from __future__ import annotations

from jobgate.v1 import job_pb2
from tests.e2e.api import BATCH, INTERACTIVE, SYSTEM, Api, fresh_name


async def claim_ids(api: Api, models: list[str], count: int) -> list[str]:
    ids = []
    for _ in range(count):
        claimed = await api.claim(models, wait=2.0)
        assert len(claimed) == 1
        ids.append(claimed[0].job.id)
    return ids


async def test_claims_interactive_then_system_then_batch(api: Api, model: str) -> None:
    batch = await api.submit(model, priority=BATCH)
    system = await api.submit(model, priority=SYSTEM)
    interactive = await api.submit(model, priority=INTERACTIVE)

    assert await claim_ids(api, [model], 3) == [interactive.id, system.id, batch.id]


async def test_claims_fifo_inside_a_priority_class(api: Api, model: str) -> None:
    submitted = [(await api.submit(model, priority=SYSTEM)).id for _ in range(5)]

    assert await claim_ids(api, [model], 5) == submitted


async def test_unspecified_priority_is_claimed_as_batch(api: Api, model: str) -> None:
    unspecified = await api.submit(model, priority=job_pb2.PRIORITY_UNSPECIFIED)
    batch = await api.submit(model, priority=BATCH)
    system = await api.submit(model, priority=SYSTEM)

    assert await claim_ids(api, [model], 3) == [system.id, unspecified.id, batch.id]


async def test_worker_of_two_models_claims_by_priority_then_submit_order(api: Api) -> None:
    first, second = fresh_name("m"), fresh_name("m")
    batch_first = await api.submit(first, priority=BATCH)
    interactive_second = await api.submit(second, priority=INTERACTIVE)
    batch_second = await api.submit(second, priority=BATCH)
    interactive_first = await api.submit(first, priority=INTERACTIVE)

    assert await claim_ids(api, [first, second], 4) == [
        interactive_second.id,
        interactive_first.id,
        batch_first.id,
        batch_second.id,
    ]


async def test_claim_takes_only_jobs_of_the_workers_models(api: Api, model: str) -> None:
    await api.submit(fresh_name("m"), priority=INTERACTIVE)
    mine = await api.submit(model, priority=BATCH)

    claimed = await api.claim([model], max_jobs=5)

    assert [c.job.id for c in claimed] == [mine.id]


async def test_queue_position_counts_the_jobs_claimed_before(api: Api, model: str) -> None:
    batch_1 = await api.submit(model, priority=BATCH)
    batch_2 = await api.submit(model, priority=BATCH)
    system = await api.submit(model, priority=SYSTEM)
    interactive = await api.submit(model, priority=INTERACTIVE)

    positions = {
        job_id: (await api.get(job_id)).queue_position
        for job_id in (interactive.id, system.id, batch_1.id, batch_2.id)
    }

    assert positions == {interactive.id: 0, system.id: 1, batch_1.id: 2, batch_2.id: 3}


async def test_submit_answer_carries_the_queue_position(api: Api, model: str) -> None:
    first = await api.submit(model)
    second = await api.submit(model)

    assert first.HasField("queue_position") and first.queue_position == 0
    assert second.HasField("queue_position") and second.queue_position == 1


async def test_queue_position_moves_up_as_jobs_ahead_are_claimed(api: Api, model: str) -> None:
    await api.submit(model)
    await api.submit(model)
    last = await api.submit(model)
    assert (await api.get(last.id)).queue_position == 2

    await api.claim([model], max_jobs=2)

    assert (await api.get(last.id)).queue_position == 0


async def test_queue_position_is_unset_once_processing_or_terminal(api: Api, model: str) -> None:
    await api.submit(model)
    claimed = await api.claim_one(model)

    processing = await api.get(claimed.job.id)
    assert processing.status == job_pb2.JOB_STATUS_PROCESSING
    assert not processing.HasField("queue_position")
    assert not claimed.job.HasField("queue_position")

    await api.complete(claimed.job.id, claimed.lease_id)
    assert not (await api.get(claimed.job.id)).HasField("queue_position")
