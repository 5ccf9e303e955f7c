"""ReportAndClaim: results, heartbeats and the next claim in one call, with SetResult's rules."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from tests.helpers import assert_eventually
from tests.servers.harness import Harness, fails, seconds

pb = worker_service_pb2


def completed(claimed: pb.ClaimedJob, result: bytes = b"ok") -> pb.SetResultRequest:
    return pb.SetResultRequest(
        job_id=claimed.job.id,
        lease_id=claimed.lease_id,
        status=job_pb2.JOB_STATUS_COMPLETED,
        result=result,
    )


def beat(claimed: pb.ClaimedJob, progress: float = 0.5) -> pb.HeartbeatRequest:
    return pb.HeartbeatRequest(job_id=claimed.job.id, lease_id=claimed.lease_id, progress=progress)


async def exchange(harness: Harness, **fields: object) -> pb.ReportAndClaimResponse:
    request = pb.ReportAndClaimRequest(worker_id="w1", models=["m"], **fields)  # type: ignore[arg-type]
    return await harness.worker.ReportAndClaim(request, timeout=10)


async def get(harness: Harness, job_id: str) -> job_pb2.Job:
    return (await harness.job.Get(job_service_pb2.GetRequest(job_id=job_id))).job


async def test_a_result_and_the_next_claim_share_one_call(harness: Harness) -> None:
    first, second = await harness.submit(), await harness.submit()
    [claimed] = await harness.claim()
    response = await exchange(harness, results=[completed(claimed)], max_jobs=1)
    assert [(a.job_id, a.outcome) for a in response.results] == [
        (first.id, pb.REPORT_OUTCOME_APPLIED)
    ]
    assert [c.job.id for c in response.jobs] == [second.id]
    assert (await get(harness, first.id)).status == job_pb2.JOB_STATUS_COMPLETED
    assert response.jobs[0].job.status == job_pb2.JOB_STATUS_PROCESSING


async def test_several_results_are_answered_in_request_order(harness: Harness) -> None:
    for _ in range(3):
        await harness.submit()
    claimed = await harness.claim(max_jobs=3)
    results = [completed(c) for c in reversed(claimed)]
    response = await exchange(harness, results=results)
    assert [a.job_id for a in response.results] == [r.job_id for r in results]
    assert {a.outcome for a in response.results} == {pb.REPORT_OUTCOME_APPLIED}
    assert list(response.jobs) == []  # max_jobs 0 claims nothing


async def test_a_stale_lease_is_answered_in_its_outcome_and_spares_the_others(
    harness: Harness,
) -> None:
    await harness.submit()
    await harness.submit()
    good, stale = await harness.claim(max_jobs=2)
    stale_result = completed(stale)
    stale_result.lease_id = "not-the-lease"
    response = await exchange(harness, results=[stale_result, completed(good)])
    assert [a.outcome for a in response.results] == [
        pb.REPORT_OUTCOME_LEASE_LOST,
        pb.REPORT_OUTCOME_APPLIED,
    ]
    assert (await get(harness, stale.job.id)).status == job_pb2.JOB_STATUS_PROCESSING
    assert (await get(harness, good.job.id)).status == job_pb2.JOB_STATUS_COMPLETED


async def test_a_result_for_a_cancelled_job_is_answered_job_cancelled(harness: Harness) -> None:
    job = await harness.submit()
    [claimed] = await harness.claim()
    await harness.job.Cancel(job_service_pb2.CancelRequest(job_id=job.id))
    response = await exchange(harness, results=[completed(claimed)])
    assert response.results[0].outcome == pb.REPORT_OUTCOME_JOB_CANCELLED
    assert (await get(harness, job.id)).status == job_pb2.JOB_STATUS_CANCELLED


async def test_a_result_repeated_after_a_lost_answer_is_applied_once(harness: Harness) -> None:
    job = await harness.submit()
    [claimed] = await harness.claim()
    first = await exchange(harness, results=[completed(claimed)])
    again = await exchange(harness, results=[completed(claimed)])
    assert first.results[0].outcome == again.results[0].outcome == pb.REPORT_OUTCOME_APPLIED
    finished = await harness.value(
        "jobgate_jobs_finished_total",
        {"model": "m", "priority": "batch", "status": "completed"},
    )
    assert finished == 1.0
    assert (await get(harness, job.id)).status == job_pb2.JOB_STATUS_COMPLETED


async def test_heartbeats_extend_leases_and_report_cancel(harness: Harness) -> None:
    kept = await harness.submit()
    cancelled = await harness.submit()
    first, second = await harness.claim(max_jobs=2)
    await harness.job.Cancel(job_service_pb2.CancelRequest(job_id=cancelled.id))
    response = await exchange(harness, heartbeats=[beat(first, 0.25), beat(second)])
    answers = {a.job_id: a for a in response.heartbeats}
    assert answers[kept.id].outcome == pb.REPORT_OUTCOME_APPLIED
    assert answers[kept.id].lease_expire_time.seconds > 0
    assert not answers[kept.id].cancel_requested
    assert answers[cancelled.id].cancel_requested
    assert (await get(harness, kept.id)).progress == 0.25


async def test_a_heartbeat_for_a_stale_lease_is_lease_lost(harness: Harness) -> None:
    await harness.submit()
    [claimed] = await harness.claim()
    stale = beat(claimed)
    stale.lease_id = "not-the-lease"
    response = await exchange(harness, heartbeats=[stale])
    assert response.heartbeats[0].outcome == pb.REPORT_OUTCOME_LEASE_LOST


async def test_the_claim_long_polls_after_applying_the_results(harness: Harness) -> None:
    job = await harness.submit()
    [claimed] = await harness.claim()
    waiting = asyncio.create_task(
        exchange(harness, results=[completed(claimed)], max_jobs=1, wait=seconds(20))
    )

    async def applied() -> bool:
        return (await get(harness, job.id)).status == job_pb2.JOB_STATUS_COMPLETED

    await assert_eventually(applied)  # the result is in before any job came
    assert not waiting.done()
    later = await harness.submit()
    response = await asyncio.wait_for(waiting, 5)
    assert [c.job.id for c in response.jobs] == [later.id]


async def test_with_heartbeats_the_call_does_not_wait_for_a_job(harness: Harness) -> None:
    await harness.submit()
    [claimed] = await harness.claim()
    response = await asyncio.wait_for(
        exchange(harness, heartbeats=[beat(claimed)], max_jobs=1, wait=seconds(30)), 5
    )
    assert list(response.jobs) == []


BAD_ID = pb.SetResultRequest(job_id="bad", lease_id="l", status=job_pb2.JOB_STATUS_COMPLETED)
NO_LEASE = pb.HeartbeatRequest(job_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"max_jobs": 65}, "max_jobs"),
        ({"max_jobs": 1, "models": []}, "models"),
        ({"results": [BAD_ID]}, "results[0].job_id"),
        ({"heartbeats": [NO_LEASE]}, "heartbeats[0].lease_id"),
        ({"results": [pb.SetResultRequest()] * 65}, "results"),
        ({"max_jobs": 1, "pool": "GPU-A"}, "pool"),
    ],
)
async def test_bad_input_is_invalid_argument_naming_the_item(
    harness: Harness, fields: dict[str, object], field: str
) -> None:
    request = pb.ReportAndClaimRequest(worker_id="w1", models=["m"])
    for name, value in fields.items():
        if isinstance(value, list):
            del getattr(request, name)[:]
            getattr(request, name).extend(value)
        else:
            setattr(request, name, value)
    failure = await fails(harness.worker.ReportAndClaim(request, timeout=5))
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in failure.violations


async def test_a_bad_item_changes_nothing(harness: Harness) -> None:
    job = await harness.submit()
    [claimed] = await harness.claim()
    request = pb.ReportAndClaimRequest(worker_id="w1", results=[completed(claimed), BAD_ID])
    await fails(harness.worker.ReportAndClaim(request, timeout=5))
    assert (await get(harness, job.id)).status == job_pb2.JOB_STATUS_PROCESSING


async def test_the_heartbeats_of_one_call_go_to_the_store_together(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        await harness.submit()
    claimed = await harness.claim(max_jobs=3)
    store = harness.serving.store
    beat_once = store.heartbeat
    started: list[str] = []
    all_started = asyncio.Event()

    async def held_until_all_started(job_id: str, *args: Any) -> Any:
        # One after another, the first beat would wait here for the others forever.
        started.append(job_id)
        if len(started) == len(claimed):
            all_started.set()
        await asyncio.wait_for(all_started.wait(), timeout=5)
        return await beat_once(job_id, *args)

    monkeypatch.setattr(store, "heartbeat", held_until_all_started)
    response = await exchange(harness, heartbeats=[beat(c) for c in claimed])
    assert [a.job_id for a in response.heartbeats] == [c.job.id for c in claimed]
    assert {a.outcome for a in response.heartbeats} == {pb.REPORT_OUTCOME_APPLIED}
