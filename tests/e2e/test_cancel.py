"""Cancel in every state (DESIGN: Cancel)."""

from __future__ import annotations

import grpc

from tests.e2e.api import (
    CANCELLED,
    COMPLETED,
    HELD,
    PARTIAL,
    PROCESSING,
    QUEUED,
    Api,
    failure_of,
    spec,
)
from tests.e2e.test_leases import wait_for_status

UNKNOWN_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


async def test_cancel_queued_job_ends_cancelled_and_it_is_never_claimed(
    api: Api, model: str
) -> None:
    job = await api.submit(model)

    answer = await api.cancel(job.id)

    assert answer.cancelled
    assert answer.job.status == CANCELLED
    assert answer.job.HasField("end_time")
    assert not answer.job.HasField("queue_position")
    assert await api.claim([model], wait=0.3) == []


async def test_cancel_records_the_reason(api: Api, model: str) -> None:
    job = await api.submit(model)

    answer = await api.cancel(job.id, reason="user gave up")

    assert (answer.job.error_code, answer.job.error_message) == ("CANCELLED", "user gave up")


async def test_cancel_processing_job_ends_cancelled_at_once(api: Api, model: str) -> None:
    job = await api.submit(model)
    await api.claim_one(model)

    answer = await api.cancel(job.id)

    assert answer.cancelled
    assert answer.job.status == CANCELLED
    assert answer.job.cancel_requested
    assert (await api.get(job.id)).status == CANCELLED


async def test_heartbeat_after_cancel_answers_cancel_requested(api: Api, model: str) -> None:
    job = await api.submit(model)
    claimed = await api.claim_one(model)
    assert not (await api.heartbeat(job.id, claimed.lease_id, 0.1)).cancel_requested

    await api.cancel(job.id)
    beat = await api.heartbeat(job.id, claimed.lease_id, 0.2)

    assert beat.cancel_requested


async def test_set_result_after_cancel_is_job_cancelled_and_changes_nothing(
    api: Api, model: str
) -> None:
    job = await api.submit(model)
    claimed = await api.claim_one(model)
    await api.cancel(job.id)

    failure = await failure_of(api.complete(job.id, claimed.lease_id, b"late"))

    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION, failure
    assert failure.reason == "JOB_CANCELLED"
    stored = await api.get(job.id)
    assert (stored.status, stored.result) == (CANCELLED, b"")


async def test_cancel_terminal_job_is_not_an_error(api: Api, model: str) -> None:
    job = await api.submit(model)
    await api.run_to_completion(model, b"answer")

    answer = await api.cancel(job.id)

    assert not answer.cancelled
    assert (answer.job.status, answer.job.result) == (COMPLETED, b"answer")


async def test_cancel_twice_cancels_once(api: Api, model: str) -> None:
    job = await api.submit(model)
    await api.cancel(job.id)

    again = await api.cancel(job.id)

    assert not again.cancelled
    assert again.job.status == CANCELLED


async def test_cancel_unknown_job_is_not_found(api: Api) -> None:
    failure = await failure_of(api.cancel(UNKNOWN_ID))

    assert failure.code == grpc.StatusCode.NOT_FOUND, failure
    assert failure.reason == "JOB_NOT_FOUND"


async def test_cancel_held_child_means_it_never_runs(api: Api, model: str) -> None:
    group = await api.submit_group([spec(model), spec(model)], max_parallel=1)
    first, second = (child.id for child in group.children)
    assert (await api.get(second)).status == HELD

    answer = await api.cancel(second)
    running = await api.claim_one(model)
    await api.complete(running.job.id, running.lease_id)

    assert answer.cancelled and answer.job.status == CANCELLED
    assert running.job.id == first
    assert await api.claim([model], wait=0.3) == []
    assert (await api.get(group.id)).status == PARTIAL


async def test_cancel_group_cancels_waiting_children_and_lets_running_ones_finish(
    api: Api, model: str
) -> None:
    group = await api.submit_group([spec(model) for _ in range(4)], max_parallel=2)
    children = [child.id for child in group.children]
    running = await api.claim_one(model)
    assert running.job.id == children[0]

    answer = await api.cancel(group.id)

    assert answer.cancelled
    statuses = [(await api.get(child)).status for child in children]
    assert statuses == [PROCESSING, CANCELLED, CANCELLED, CANCELLED]
    assert not (await api.heartbeat(running.job.id, running.lease_id, 0.5)).cancel_requested
    assert await api.claim([model], wait=0.3) == []

    finished = await api.complete(running.job.id, running.lease_id, b"kept")

    assert (finished.status, finished.result) == (COMPLETED, b"kept")
    await wait_for_status(api, group.id, CANCELLED, timeout=5.0)
    assert (await api.get(children[0])).result == b"kept"


async def test_cancel_group_of_queued_children_ends_it_cancelled_at_once(
    api: Api, model: str
) -> None:
    group = await api.submit_group([spec(model), spec(model)])

    answer = await api.cancel(group.id)

    assert answer.cancelled
    assert answer.job.status == CANCELLED
    assert all(child.status == CANCELLED for child in answer.job.children)
    assert [(await api.get(c.id)).status for c in group.children] == [CANCELLED, CANCELLED]
    assert QUEUED not in [c.status for c in (await api.get(group.id)).children]


async def test_cancelling_a_running_child_releases_the_next_held_child(
    api: Api, model: str
) -> None:
    group = await api.submit_group([spec(model), spec(model)], max_parallel=1)
    first, second = (child.id for child in group.children)
    await api.claim_one(model)

    await api.cancel(first)

    assert (await api.get(second)).status == QUEUED
    assert (await api.get(group.id)).status == PROCESSING
