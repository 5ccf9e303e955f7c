"""ClaimNext: long-poll, batching, and what a claim stamps (DESIGN: Claim)."""

from __future__ import annotations

import asyncio
import time

import grpc

from jobgate.v1 import worker_service_pb2
from tests.e2e.api import INTERACTIVE, PROCESSING, QUEUED, Api, duration, failure_of
from tests.e2e.conftest import ApiFactory
from tests.e2e.test_cancel import UNKNOWN_ID
from tests.timings import Timings


async def test_waiting_claim_gets_a_newly_submitted_job(
    api: Api, model: str, timings: Timings
) -> None:
    waiting = asyncio.create_task(api.claim([model], wait=20.0))
    # The claim must really be waiting (not answered early) before the submit.
    done, _ = await asyncio.wait({waiting}, timeout=0.3)
    assert not done, "an idle ClaimNext answered before its wait passed"

    job = await api.submit(model, b"hello")
    submitted = time.monotonic()
    claimed = await waiting
    timings("wake-up: a waiting claim answers a new job", time.monotonic() - submitted, "e2e")

    assert [c.job.id for c in claimed] == [job.id]
    assert claimed[0].payload == b"hello"


async def test_claim_answers_empty_when_the_wait_passes(
    api: Api, model: str, timings: Timings
) -> None:
    started = time.monotonic()
    claimed = await api.claim([model], wait=0.5)
    elapsed = time.monotonic() - started

    assert claimed == []
    assert elapsed >= 0.45, f"wait=0.5s answered after {elapsed:.3f}s"
    timings("long poll: an empty answer past its wait", elapsed - 0.5, "e2e ClaimNext")


async def test_claim_without_wait_answers_empty(api: Api, model: str, timings: Timings) -> None:
    started = time.monotonic()
    claimed = await api.claim([model], wait=0.0)

    assert claimed == []
    timings("long poll: wait 0 answers", time.monotonic() - started, "e2e ClaimNext")


async def test_max_jobs_returns_a_batch_in_claim_order(api: Api, model: str) -> None:
    batch = [(await api.submit(model)).id for _ in range(3)]
    interactive = await api.submit(model, priority=INTERACTIVE)

    first = await api.claim([model], max_jobs=3)
    rest = await api.claim([model], max_jobs=3)

    assert [c.job.id for c in first] == [interactive.id, batch[0], batch[1]]
    assert [c.job.id for c in rest] == [batch[2]]


async def test_each_job_of_a_batch_has_its_own_lease(api: Api, model: str) -> None:
    for _ in range(3):
        await api.submit(model)

    claimed = await api.claim([model], max_jobs=3)

    leases = [c.lease_id for c in claimed]
    assert len(claimed) == 3 and all(leases) and len(set(leases)) == 3
    for job in claimed:
        await api.complete(job.job.id, job.lease_id)


async def test_max_jobs_zero_means_one(api: Api, model: str) -> None:
    for _ in range(2):
        await api.submit(model)

    assert len(await api.claim([model], max_jobs=0)) == 1


async def test_claim_stamps_processing_attempt_worker_and_lease(api: Api, model: str) -> None:
    job = await api.submit(model, b"input", content_type="text/plain", labels={"k": "v"})

    before = time.time()
    claimed = await api.claim_one(model)
    stored = await api.get(job.id)

    assert claimed.job.id == job.id
    assert claimed.payload == b"input"
    assert claimed.lease_id
    for view in (claimed.job, stored):
        assert view.status == PROCESSING
        assert view.attempts == 1
        assert view.worker_id == api.worker_id
        assert view.content_type == "text/plain" and dict(view.labels) == {"k": "v"}
        assert view.HasField("start_time")
    expires = claimed.lease_expire_time.ToNanoseconds() / 1e9
    # The shared deployment runs --lease-timeout 2 (store clock = this host's clock).
    assert before + 1.0 < expires < before + 10.0


async def test_a_processing_job_is_not_claimed_again(api: Api, model: str) -> None:
    await api.submit(model)
    await api.claim_one(model)

    assert await api.claim([model], wait=0.2) == []


async def test_one_new_job_wakes_exactly_one_of_many_waiting_claims(
    apis: ApiFactory, api: Api, model: str
) -> None:
    waiters = [apis(api.client_metadata, ()) for _ in range(5)]
    claims = [asyncio.create_task(w.claim([model], wait=1.5)) for w in waiters]
    done, _ = await asyncio.wait(claims, timeout=0.3)
    assert not done

    job = await api.submit(model)
    answers = await asyncio.gather(*claims)

    assert sorted(len(answer) for answer in answers) == [0, 0, 0, 0, 1]
    assert [c.job.id for answer in answers for c in answer] == [job.id]


async def test_heartbeat_for_an_unknown_job_is_not_found(api: Api) -> None:
    failure = await failure_of(api.heartbeat(UNKNOWN_ID, "made-up-lease"))

    assert failure.code == grpc.StatusCode.NOT_FOUND, failure
    assert failure.reason == "JOB_NOT_FOUND"


async def test_heartbeat_with_a_made_up_lease_is_lease_lost(api: Api, model: str) -> None:
    job = await api.submit(model)

    failure = await failure_of(api.heartbeat(job.id, "made-up-lease"))

    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION, failure
    assert failure.reason == "LEASE_LOST"
    assert (await api.get(job.id)).status == QUEUED


async def test_a_finished_job_has_ordered_timestamps_and_its_result(api: Api, model: str) -> None:
    job = await api.submit(model)
    claimed = await api.claim_one(model)

    done = await api.complete(job.id, claimed.lease_id, b"out", content_type="text/plain")

    assert (done.result, done.result_content_type) == (b"out", "text/plain")
    times = [done.create_time, done.start_time, done.end_time]
    assert all(t.ToNanoseconds() > 0 for t in times)
    assert [t.ToNanoseconds() for t in times] == sorted(t.ToNanoseconds() for t in times)
    assert done.update_time.ToNanoseconds() >= done.end_time.ToNanoseconds()


async def assert_next_claim_gets_a_fresh_job(api: Api, model: str, timings: Timings) -> None:
    job = await api.submit(model)
    submitted = time.monotonic()
    claimed = await api.claim_one(model, wait=5.0)

    assert claimed.job.id == job.id
    assert claimed.job.attempts == 1, "an abandoned long poll took the job first"
    timings("wake-up: the claim after an abandoned poll", time.monotonic() - submitted)


async def test_an_abandoned_long_poll_swallows_no_job(
    api: Api, model: str, timings: Timings
) -> None:
    abandoned = asyncio.create_task(api.claim([model], wait=20.0))
    done, _ = await asyncio.wait({abandoned}, timeout=0.3)
    assert not done

    abandoned.cancel()
    await asyncio.gather(abandoned, return_exceptions=True)

    await assert_next_claim_gets_a_fresh_job(api, model, timings)


async def test_a_long_poll_past_its_callers_deadline_swallows_no_job(
    api: Api, model: str, timings: Timings
) -> None:
    request = worker_service_pb2.ClaimNextRequest(
        worker_id=api.worker_id, models=[model], wait=duration(20.0)
    )
    try:
        answer = await api.workers.ClaimNext(request, timeout=1.0)
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    else:
        assert list(answer.jobs) == []

    await assert_next_claim_gets_a_fresh_job(api, model, timings)
