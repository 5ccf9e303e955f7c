"""StreamStatus: snapshot first, one per change, closes after terminal (DESIGN: JobService)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from jobgate.v1 import job_pb2
from tests.e2e.api import CANCELLED, COMPLETED, PROCESSING, QUEUED, Api, parse_failure
from tests.e2e.test_cancel import UNKNOWN_ID

NEXT_TIMEOUT = 5.0
# The end-of-stream sentinel of grpc.aio reads (missing from grpc-stubs).
EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]


async def next_job(call: Any) -> job_pb2.Job:
    response = await asyncio.wait_for(call.read(), timeout=NEXT_TIMEOUT)
    assert response is not EOF, "the stream closed early"
    job: job_pb2.Job = response.job
    return job


async def assert_closed_ok(call: Any) -> None:
    assert await asyncio.wait_for(call.read(), timeout=NEXT_TIMEOUT) is EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_stream_sends_the_current_snapshot_first(api: Api, model: str) -> None:
    job = await api.submit(model)
    call = api.stream(job.id)

    first = await next_job(call)

    assert (first.id, first.status, first.queue_position) == (job.id, QUEUED, 0)
    call.cancel()


async def test_stream_sends_one_snapshot_per_change_then_closes(api: Api, model: str) -> None:
    job = await api.submit(model)
    call = api.stream(job.id)
    assert (await next_job(call)).status == QUEUED

    claimed = await api.claim_one(model)
    assert (await next_job(call)).status == PROCESSING

    await api.heartbeat(job.id, claimed.lease_id, 0.5, "load")
    loaded = await next_job(call)
    assert (loaded.progress, loaded.stage) == (0.5, "load")

    # A heartbeat that changes nothing sends nothing: the next snapshot is the stage change.
    await api.heartbeat(job.id, claimed.lease_id, 0.5, "load")
    await api.heartbeat(job.id, claimed.lease_id, 0.5, "infer")
    inferring = await next_job(call)
    assert (inferring.progress, inferring.stage) == (0.5, "infer")

    await api.heartbeat(job.id, claimed.lease_id, 0.75, "infer")
    assert (await next_job(call)).progress == 0.75

    await api.complete(job.id, claimed.lease_id, b"out")
    done = await next_job(call)
    assert (done.status, done.result) == (COMPLETED, b"out")
    await assert_closed_ok(call)


async def test_stream_of_a_terminal_job_sends_it_and_closes(api: Api, model: str) -> None:
    job = await api.submit(model)
    await api.cancel(job.id)
    call = api.stream(job.id)

    assert (await next_job(call)).status == CANCELLED
    await assert_closed_ok(call)


async def test_stream_refreshes_the_queue_position_while_queued(api: Api, model: str) -> None:
    await api.submit(model)
    await api.submit(model)
    last = await api.submit(model)
    call = api.stream(last.id)
    assert (await next_job(call)).queue_position == 2

    # Each claimed job is completed at once: a lease left to expire (2 s here)
    # would put it back ahead of `last` while the stream settles (1 s per move).
    await api.run_to_completion(model)
    assert (await next_job(call)).queue_position == 1
    await api.run_to_completion(model)
    assert (await next_job(call)).queue_position == 0
    call.cancel()


async def test_stream_ends_when_the_job_is_cancelled(api: Api, model: str) -> None:
    job = await api.submit(model)
    call = api.stream(job.id)
    await next_job(call)

    await api.cancel(job.id)

    assert (await next_job(call)).status == CANCELLED
    await assert_closed_ok(call)


async def test_stream_of_a_group_follows_its_progress(api: Api, model: str) -> None:
    group = await api.submit_group([job_pb2.JobSpec(model=model) for _ in range(2)])
    call = api.stream(group.id)
    assert (await next_job(call)).status == QUEUED

    first, second = await api.claim([model], max_jobs=2)
    assert (await next_job(call)).status == PROCESSING
    await api.complete(first.job.id, first.lease_id)
    assert (await next_job(call)).progress == 0.5
    await api.complete(second.job.id, second.lease_id)

    final = await next_job(call)
    assert (final.status, final.progress) == (COMPLETED, 1.0)
    await assert_closed_ok(call)


async def test_stream_of_an_unknown_job_is_not_found(api: Api) -> None:
    call = api.stream(UNKNOWN_ID)

    try:
        await asyncio.wait_for(call.read(), timeout=NEXT_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        failure = parse_failure(error)
    else:
        raise AssertionError("StreamStatus of an unknown job sent a snapshot")

    assert failure.code == grpc.StatusCode.NOT_FOUND, failure
    assert failure.reason == "JOB_NOT_FOUND"
