"""Groups: held children, max_parallel, parent status and progress (DESIGN: Groups)."""

from __future__ import annotations

from jobgate.v1 import job_pb2
from tests.e2e.api import (
    BATCH,
    COMPLETED,
    FAILED,
    HELD,
    PARTIAL,
    PROCESSING,
    QUEUED,
    SYSTEM,
    Api,
    spec,
)
from tests.e2e.test_leases import PAST_DEADLINE, heartbeat_until_server_time


def child_ids(group: job_pb2.Job) -> list[str]:
    return [child.id for child in sorted(group.children, key=lambda c: c.child_index)]


async def statuses(api: Api, ids: list[str]) -> list[int]:
    return [(await api.get(job_id)).status for job_id in ids]


async def test_children_beyond_max_parallel_start_held(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model) for _ in range(4)], max_parallel=2)

    assert group.kind == job_pb2.JOB_KIND_GROUP
    assert group.status == QUEUED
    assert group.max_parallel == 2
    assert [c.child_index for c in group.children] == [0, 1, 2, 3]
    assert await statuses(api, child_ids(group)) == [QUEUED, QUEUED, HELD, HELD]


async def test_children_know_their_parent_and_index(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model), spec(model)])

    children = [await api.get(job_id) for job_id in child_ids(group)]

    assert [(c.kind, c.parent_id, c.child_index) for c in children] == [
        (job_pb2.JOB_KIND_CHILD, group.id, 0),
        (job_pb2.JOB_KIND_CHILD, group.id, 1),
    ]


async def test_no_more_than_max_parallel_children_run_at_once(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model) for _ in range(4)], max_parallel=2)

    claimed = await api.claim([model], max_jobs=4)

    assert [c.job.id for c in claimed] == child_ids(group)[:2]
    assert await api.claim([model], wait=0.3) == []


async def test_a_finished_child_releases_the_next_held_child_at_once(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model) for _ in range(4)], max_parallel=2)
    ids = child_ids(group)
    first, _ = await api.claim([model], max_jobs=2)

    await api.complete(first.job.id, first.lease_id)

    assert await statuses(api, ids) == [COMPLETED, PROCESSING, QUEUED, HELD]


async def test_a_failed_child_also_releases_the_next_held_child(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model), spec(model)], max_parallel=1)
    first = await api.claim_one(model)

    await api.fail(first.job.id, first.lease_id)

    assert await statuses(api, child_ids(group)) == [FAILED, QUEUED]


async def test_max_parallel_one_runs_children_strictly_in_index_order(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model, bytes([i])) for i in range(4)], max_parallel=1)
    order = []

    for _ in range(4):
        claimed = await api.claim([model], max_jobs=4, wait=2.0)
        assert len(claimed) == 1, "a serial group ran two children at once"
        order.append(claimed[0].job.child_index)
        await api.complete(claimed[0].job.id, claimed[0].lease_id)

    assert order == [0, 1, 2, 3]
    assert (await api.get(group.id)).status == COMPLETED


async def test_parent_is_processing_once_a_child_starts(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model), spec(model)])

    await api.claim_one(model)

    parent = await api.get(group.id)
    assert parent.status == PROCESSING
    assert parent.HasField("start_time")


async def test_parent_progress_is_the_share_of_terminal_children(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model) for _ in range(4)])
    first, second, _, _ = await api.claim([model], max_jobs=4)

    await api.complete(first.job.id, first.lease_id)
    after_one = await api.get(group.id)
    await api.fail(second.job.id, second.lease_id)
    after_two = await api.get(group.id)

    assert (after_one.status, after_one.progress) == (PROCESSING, 0.25)
    assert (after_two.status, after_two.progress) == (PROCESSING, 0.5)


async def finish_children(api: Api, model: str, outcomes: list[bool]) -> None:
    for succeed in outcomes:
        claimed = await api.claim_one(model)
        if succeed:
            await api.complete(claimed.job.id, claimed.lease_id)
        else:
            await api.fail(claimed.job.id, claimed.lease_id)


async def test_parent_completed_when_every_child_completed(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model) for _ in range(3)], max_parallel=1)

    await finish_children(api, model, [True, True, True])

    parent = await api.get(group.id)
    assert (parent.status, parent.progress) == (COMPLETED, 1.0)
    assert parent.HasField("end_time")
    assert [c.status for c in parent.children] == [COMPLETED] * 3


async def test_parent_failed_when_no_child_completed(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model) for _ in range(3)], max_parallel=1)

    await finish_children(api, model, [False, False, False])

    parent = await api.get(group.id)
    assert parent.status == FAILED
    assert [c.error_code for c in parent.children] == ["BOOM"] * 3


async def test_parent_partial_when_some_children_completed(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model) for _ in range(3)], max_parallel=1)

    await finish_children(api, model, [True, False, True])

    parent = await api.get(group.id)
    assert parent.status == PARTIAL
    assert [c.status for c in parent.children] == [COMPLETED, FAILED, COMPLETED]


async def test_children_keys_are_the_parent_key_and_index(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model), spec(model)], key="batch-7")

    keys = [(await api.get(job_id)).idempotency_key for job_id in child_ids(group)]

    assert group.idempotency_key == "batch-7"
    assert keys == ["batch-7#0", "batch-7#1"]


async def test_children_share_the_parents_priority(api: Api, model: str) -> None:
    batch_job = await api.submit(model, priority=BATCH)
    group = await api.submit_group([spec(model)], priority=SYSTEM)

    claimed = await api.claim_one(model)

    assert claimed.job.id == child_ids(group)[0]
    assert claimed.job.priority == SYSTEM
    assert (await api.get(batch_job.id)).status == QUEUED


async def test_a_group_parent_is_never_claimed(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model), spec(model)])

    claimed = await api.claim([model], max_jobs=10)

    assert sorted(c.job.id for c in claimed) == sorted(child_ids(group))
    assert all(c.job.kind == job_pb2.JOB_KIND_CHILD for c in claimed)


async def test_held_child_has_no_queue_position(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model), spec(model)], max_parallel=1)
    queued, held = [await api.get(job_id) for job_id in child_ids(group)]

    assert queued.HasField("queue_position") and queued.queue_position == 0
    assert not held.HasField("queue_position")


async def test_a_held_childs_queue_timeout_starts_when_it_is_released(api: Api, model: str) -> None:
    children = [spec(model, queue_timeout=0.5), spec(model, queue_timeout=0.5)]
    group = await api.submit_group(children, max_parallel=1)
    first = await api.claim_one(model)

    # Keep the first child running until the server's clock is well past the
    # second one's queue timeout as counted from the group's submit.
    from_submit = group.create_time.ToNanoseconds() + round(0.5 * 1e9)
    await heartbeat_until_server_time(
        api, first.job.id, first.lease_id, from_submit + round(PAST_DEADLINE * 1e9)
    )
    held = await api.get(child_ids(group)[1])
    await api.complete(first.job.id, first.lease_id)
    second = await api.claim_one(model)

    assert held.status == HELD
    assert second.job.id == child_ids(group)[1]
