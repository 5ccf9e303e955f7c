"""Two gateways and two worker-servers on one Redis partition (DESIGN: stateless replicas).

Any call may land on any replica; behaviour must not depend on which one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import grpc
import pytest

from jobgate.v1 import job_service_pb2, worker_service_pb2
from tests.e2e.api import (
    CANCELLED,
    COMPLETED,
    PROCESSING,
    QUEUED,
    Api,
    fresh_name,
    parse_failure,
    spec,
    tenant_metadata,
)
from tests.e2e.harness import FAST_SETTINGS, Deployment, redis_deployment
from tests.e2e.measure import dispatch_latency
from tests.e2e.test_dispatch_latency import RESULTS, record
from tests.e2e.test_stream import assert_closed_ok, next_job
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.timings import Timings

pytestmark = pytest.mark.redis

JOBS = 120


@pytest.fixture(scope="module")
def replicas(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    # A long lease: the exactly-once test must not see expiries, only contention.
    settings = {**FAST_SETTINGS, "lease-timeout": "30"}
    workdir = tmp_path_factory.mktemp("replicas")
    partition = f"rep{uuid.uuid4().hex[:10]}"
    deployment = redis_deployment(
        workdir, redis_server.url, partition, settings, gateways=2, worker_servers=2
    ).start()
    yield deployment
    deployment.stop()


@pytest.fixture
async def sides(replicas: Deployment) -> AsyncIterator[tuple[Api, Api]]:
    """Api `a` talks to gateway 0 and worker-server 0, `b` to gateway 1 and worker-server 1."""
    tenant = tenant_metadata(fresh_name("t"))
    channels = [
        grpc.aio.insecure_channel(target)
        for target in (*replicas.job_targets, *replicas.worker_targets)
    ]
    try:
        yield (
            Api(channels[0], channels[2], tenant),
            Api(channels[1], channels[3], tenant),
        )
    finally:
        for channel in channels:
            await channel.close(None)


async def test_job_submitted_on_one_gateway_is_visible_on_the_other(
    sides: tuple[Api, Api], model: str
) -> None:
    a, b = sides
    job = await a.submit(model, b"x")

    seen = await b.get(job.id)

    assert (seen.id, seen.status) == (job.id, QUEUED)


async def test_stream_on_one_gateway_follows_work_done_through_the_other(
    sides: tuple[Api, Api], model: str
) -> None:
    a, b = sides
    job = await a.submit(model)
    call = b.stream(job.id)
    assert (await next_job(call)).status == QUEUED

    claimed = await a.claim_one(model)
    assert (await next_job(call)).status == PROCESSING
    await a.heartbeat(job.id, claimed.lease_id, 0.5, "half")
    assert (await next_job(call)).progress == 0.5
    await a.complete(job.id, claimed.lease_id, b"done")

    assert (await next_job(call)).status == COMPLETED
    await assert_closed_ok(call)


async def test_stream_refreshes_queue_position_across_replicas(
    sides: tuple[Api, Api], model: str
) -> None:
    a, b = sides
    await a.submit(model)
    behind = await a.submit(model)
    call = b.stream(behind.id)
    assert (await next_job(call)).queue_position == 1

    await a.run_to_completion(model)  # completed: an expiring lease cannot requeue it

    assert (await next_job(call)).queue_position == 0
    call.cancel()


async def test_cancel_on_one_gateway_reaches_the_worker_of_the_other(
    sides: tuple[Api, Api], model: str
) -> None:
    a, b = sides
    job = await a.submit(model)
    claimed = await a.claim_one(model)

    answer = await b.cancel(job.id)

    assert answer.cancelled
    assert (await a.get(job.id)).status == CANCELLED
    assert (await a.heartbeat(job.id, claimed.lease_id)).cancel_requested


async def test_waiting_claim_on_one_worker_server_is_woken_by_a_submit_on_the_other_gateway(
    sides: tuple[Api, Api], model: str, timings: Timings
) -> None:
    a, b = sides
    waiting = asyncio.create_task(b.claim([model], wait=20.0))
    done, _ = await asyncio.wait({waiting}, timeout=0.3)
    assert not done, "an idle ClaimNext answered before its wait passed"

    job = await a.submit(model)
    submitted = time.monotonic()
    claimed = await waiting
    latency = time.monotonic() - submitted
    timings("wake-up: a waiting claim answers a new job", latency, "across replicas")

    assert [c.job.id for c in claimed] == [job.id]


async def test_concurrent_claimers_on_both_worker_servers_get_each_job_exactly_once(
    sides: tuple[Api, Api], model: str
) -> None:
    a, b = sides
    submitted = await asyncio.gather(
        *(sides[i % 2].submit(model, str(i).encode()) for i in range(JOBS))
    )
    handed_out: list[tuple[str, str]] = []

    async def claimer(side: Api) -> None:
        while True:
            claimed = await side.claim([model], wait=0.5, max_jobs=4)
            if not claimed:
                return
            for item in claimed:
                handed_out.append((item.job.id, item.lease_id))
                await side.complete(item.job.id, item.lease_id)

    workers = [side.with_worker_id(fresh_name("w")) for side in (a, b) for _ in range(4)]
    await asyncio.gather(*(claimer(side) for side in workers))

    job_ids = [job_id for job_id, _ in handed_out]
    assert len(job_ids) == len(set(job_ids)), "a job was handed out twice"
    assert set(job_ids) == {job.id for job in submitted}
    final = await asyncio.gather(*(a.get(job.id) for job in submitted))
    assert {job.status for job in final} == {COMPLETED}
    assert {job.attempts for job in final} == {1}


async def test_recovery_on_two_worker_servers_requeues_each_lapsed_job_once(
    sides: tuple[Api, Api], model: str
) -> None:
    a, b = sides
    jobs = [await a.submit(model, run_timeout=0.3, max_attempts=3) for _ in range(10)]
    first = await a.claim([model], max_jobs=10)
    assert len(first) == 10

    async def all_requeued() -> bool:
        stored = await asyncio.gather(*(b.get(job.id) for job in jobs))
        assert {job.status for job in stored} == {QUEUED}
        return True

    await assert_eventually(all_requeued, timeout=10.0)
    stored = await asyncio.gather(*(a.get(job.id) for job in jobs))
    # A lapsed attempt is retried after the backoff, so collect with long polls.
    again: list[worker_service_pb2.ClaimedJob] = []
    while len(again) < len(jobs):
        claimed = await b.claim([model], max_jobs=10, wait=3.0)
        assert claimed, f"only {len(again)} of {len(jobs)} came back"
        again.extend(claimed)

    assert {job.attempts for job in stored} == {1}
    assert sorted(c.job.id for c in again) == sorted(job.id for job in jobs)
    assert {c.job.attempts for c in again} == {2}


async def test_cross_replica_dispatch_latency(
    sides: tuple[Api, Api],
    model: str,
    record_property: Callable[[str, object], None],
    timings: Timings,
) -> None:
    a, b = sides

    latency = await dispatch_latency(a, model, samples=50, worker=b)

    RESULTS["redis, submit on gateway A, claim on worker-server B"] = str(latency)
    record_property("dispatch_latency_cross_replica", str(latency))
    record(timings, latency, "redis, submit on gateway A, claim on worker-server B")
    # (dispatch_latency asserts, per sample, that the parked claim got the new job.)


async def test_concurrent_submits_with_one_key_on_both_gateways_make_one_job(
    sides: tuple[Api, Api], model: str
) -> None:
    request = job_service_pb2.SubmitRequest(idempotency_key="once", job=spec(model))

    answers = await asyncio.gather(*(sides[i % 2].submit_request(request) for i in range(16)))

    assert len({answer.job.id for answer in answers}) == 1
    assert sorted(answer.reused for answer in answers) == [False] + [True] * 15
    assert len(await sides[0].claim([model], max_jobs=10)) == 1


async def cancel_or_complete_race(a: Api, b: Api, model: str) -> None:
    """Cancel through gateway B while the worker completes through worker-server A."""
    job = await a.submit(model)
    claimed = await a.claim_one(model)

    cancel, result = await asyncio.gather(
        b.cancel(job.id),
        a.complete(job.id, claimed.lease_id, b"won"),
        return_exceptions=True,
    )

    final = await b.get(job.id)
    if isinstance(result, BaseException):
        failure = parse_failure(result)  # type: ignore[arg-type]
        assert failure.reason == "JOB_CANCELLED", failure
        assert not isinstance(cancel, BaseException) and cancel.cancelled
        assert (final.status, final.result) == (CANCELLED, b"")
    else:
        assert not isinstance(cancel, BaseException), cancel
        assert not cancel.cancelled
        assert (final.status, final.result) == (COMPLETED, b"won")


async def test_a_cancel_racing_a_result_on_two_replicas_has_one_winner(
    sides: tuple[Api, Api], model: str
) -> None:
    a, b = sides
    for _ in range(20):
        await cancel_or_complete_race(a, b, model)
