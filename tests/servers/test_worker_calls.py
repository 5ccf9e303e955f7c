"""WorkerService: long-poll claim with batching, heartbeat and results."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import grpc

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from serving.settings import ServerSettings
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, fails, seconds
from tests.timings import Timings


async def test_idle_claim_wakes_when_a_job_arrives(harness: Harness, timings: Timings) -> None:
    waiting = asyncio.create_task(harness.claim(wait=20))

    async def polling() -> bool:
        return harness.serving.lifecycle.in_flight == 1

    await assert_eventually(polling)
    job = await harness.submit()
    started = time.monotonic()
    claimed = await waiting
    timings("wake-up: a waiting claim answers a new job", time.monotonic() - started, "servers")
    assert [item.job.id for item in claimed] == [job.id]


async def test_claim_is_empty_when_nothing_comes_within_wait(harness: Harness) -> None:
    started = time.monotonic()
    assert await harness.claim(wait=0.3) == []
    assert time.monotonic() - started >= 0.29


async def test_claim_answers_empty_before_the_callers_deadline(harness: Harness) -> None:
    request = worker_service_pb2.ClaimNextRequest(worker_id="w", models=["m"], wait=seconds(30))
    response = await harness.worker.ClaimNext(request, timeout=1.5)
    assert list(response.jobs) == []


async def test_claim_batches_up_to_max_jobs_in_order(harness: Harness) -> None:
    ids = [(await harness.submit()).id for _ in range(3)]
    first = await harness.claim(max_jobs=2)
    second = await harness.claim(max_jobs=2)
    assert [c.job.id for c in first] == ids[:2]
    assert [c.job.id for c in second] == ids[2:]
    assert len({c.lease_id for c in first + second}) == 3


async def test_heartbeat_records_progress_and_reports_cancel(harness: Harness) -> None:
    job = await harness.submit()
    [claimed] = await harness.claim()
    beat = worker_service_pb2.HeartbeatRequest(
        job_id=job.id, lease_id=claimed.lease_id, progress=0.5, stage="decode"
    )
    assert not (await harness.worker.Heartbeat(beat)).cancel_requested
    got = (await harness.job.Get(job_service_pb2.GetRequest(job_id=job.id))).job
    assert (got.progress, got.stage) == (0.5, "decode")
    await harness.job.Cancel(job_service_pb2.CancelRequest(job_id=job.id))
    assert (await harness.worker.Heartbeat(beat)).cancel_requested


async def test_set_result_completes_the_job(harness: Harness) -> None:
    job = await harness.submit()
    [claimed] = await harness.claim()
    done = await harness.complete(claimed, b"answer")
    assert (done.status, done.result) == (job_pb2.JOB_STATUS_COMPLETED, b"answer")
    assert done.id == job.id


async def test_failed_result_without_code_is_handler_error(harness: Harness) -> None:
    await harness.submit()
    [claimed] = await harness.claim()
    request = worker_service_pb2.SetResultRequest(
        job_id=claimed.job.id, lease_id=claimed.lease_id, status=job_pb2.JOB_STATUS_FAILED
    )
    job = (await harness.worker.SetResult(request)).job
    assert (job.status, job.error_code) == (job_pb2.JOB_STATUS_FAILED, "HANDLER_ERROR")


async def test_abandoned_long_poll_does_not_swallow_a_job(harness: Harness) -> None:
    request = worker_service_pb2.ClaimNextRequest(worker_id="gone", models=["m"], wait=seconds(30))
    abandoned = harness.worker.ClaimNext(request)

    async def polling() -> bool:
        return harness.serving.lifecycle.in_flight == 1

    await assert_eventually(polling)
    abandoned.cancel()

    async def released() -> bool:
        return harness.serving.lifecycle.in_flight == 0

    await assert_eventually(released)
    job = await harness.submit()
    assert [item.job.id for item in await harness.claim()] == [job.id]


def _retryable_failure(
    claimed: worker_service_pb2.ClaimedJob,
) -> worker_service_pb2.SetResultRequest:
    return worker_service_pb2.SetResultRequest(
        job_id=claimed.job.id,
        lease_id=claimed.lease_id,
        status=job_pb2.JOB_STATUS_FAILED,
        error_code="FLAKY",
        retryable=True,
    )


async def test_a_retryable_failure_resent_before_the_next_claim_answers_the_stored_job(
    make_harness: MakeHarness,
) -> None:
    settings = ServerSettings(
        retry_backoff=timedelta(seconds=30), retry_backoff_max=timedelta(seconds=30)
    )
    harness = await make_harness(settings=settings)
    await harness.submit()
    [claimed] = await harness.claim()
    first = await harness.worker.SetResult(_retryable_failure(claimed), timeout=5)
    again = await harness.worker.SetResult(_retryable_failure(claimed), timeout=5)
    assert again.job.status == first.job.status == job_pb2.JOB_STATUS_QUEUED


async def test_a_retryable_failure_resent_after_the_next_claim_is_lease_lost(
    make_harness: MakeHarness,
) -> None:
    # docs/servers.md: the old lease is no longer the job's latest; nothing changes.
    settings = ServerSettings(retry_backoff=timedelta(milliseconds=10))
    harness = await make_harness(settings=settings)
    await harness.submit()
    [claimed] = await harness.claim()
    await harness.worker.SetResult(_retryable_failure(claimed), timeout=5)

    async def reclaimed() -> list[worker_service_pb2.ClaimedJob]:
        await harness.serving.store.recover()  # the harness runs no recovery loop
        return await harness.claim()

    [again] = await assert_eventually(reclaimed)
    failure = await fails(harness.worker.SetResult(_retryable_failure(claimed), timeout=5))
    assert (failure.code, failure.reasons) == (grpc.StatusCode.FAILED_PRECONDITION, ["LEASE_LOST"])
    assert again.job.status == job_pb2.JOB_STATUS_PROCESSING
