"""The worker daemon against a real `jobgate serve`: heartbeats, cancellation, outcomes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

import pytest

from jobgate import JobClient, JobContext, RetryableError
from jobgate.v1 import job_pb2
from jobgate.worker import Worker
from tests.e2e.harness import Deployment
from tests.helpers import assert_eventually
from tests.worker.conftest import (
    LEASE_SECONDS,
    SERVER_SETTINGS,
    running_worker,
    started,
    worker_config,
)


async def finished(client: JobClient, job_id: str, timeout: float = 15.0) -> job_pb2.Job:
    return await client.wait_for_result(job_id, timeout=timeout)


async def processing(client: JobClient, job_id: str) -> job_pb2.Job:
    async def claimed() -> job_pb2.Job | None:
        job = await client.get(job_id)
        return job if job.status == job_pb2.JOB_STATUS_PROCESSING else None

    job = await assert_eventually(claimed, timeout=15, message="the job was never claimed")
    assert job is not None
    return job


async def test_heartbeats_keep_a_job_alive_past_its_lease(
    server: Deployment, client: JobClient, model: str
) -> None:
    release = threading.Event()

    def long_job(ctx: JobContext) -> str:
        release.wait(timeout=60)  # busy on the handler thread until the test lets go
        return "done"

    async with running_worker(server.worker_target, model, long_job):
        job = await client.submit(model, b"x", max_attempts=1)
        started = await processing(client, job.id)
        past = started.start_time.ToNanoseconds() / 1e9 + LEASE_SECONDS * 2.5

        async def kept_past_its_lease() -> bool:
            now = time.time()  # the server runs on this machine's clock
            seen = await client.get(job.id)
            if (seen.status, seen.attempts) != (job_pb2.JOB_STATUS_PROCESSING, 1):
                pytest.fail(f"the job lost its lease while its handler was busy: {seen}")
            return now > past

        try:
            await assert_eventually(kept_past_its_lease, timeout=30, interval=0.2)
        finally:
            release.set()
        done = await finished(client, job.id)

    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert done.attempts == 1


async def test_heartbeats_carry_the_latest_progress_and_stage(
    server: Deployment, client: JobClient, model: str
) -> None:
    release = threading.Event()

    def reporting(ctx: JobContext) -> str:
        ctx.report(0.25, "preprocess")
        ctx.report(0.5, "infer")
        release.wait(10)
        return "done"

    async with running_worker(server.worker_target, model, reporting):
        job = await client.submit(model, b"x")

        async def progress_seen() -> bool:
            current = await client.get(job.id)
            return current.progress == 0.5 and current.stage == "infer"

        await assert_eventually(progress_seen, timeout=5)
        release.set()
        assert (await finished(client, job.id)).status == job_pb2.JOB_STATUS_COMPLETED


async def test_a_stage_longer_than_the_server_takes_is_cut_not_refused(
    server: Deployment, client: JobClient, model: str
) -> None:
    release = threading.Event()

    def verbose(ctx: JobContext) -> str:
        ctx.report(0.5, "décodage " * 40)  # 400 bytes; the server takes 128
        release.wait(10)
        return "done"

    async with running_worker(server.worker_target, model, verbose):
        job = await client.submit(model, b"x")

        async def stage_seen() -> str:
            return (await client.get(job.id)).stage

        stage = await assert_eventually(stage_seen, timeout=5)
        release.set()
        await finished(client, job.id)

    assert stage.startswith("décodage") and len(stage.encode()) <= 128


async def test_cancel_reaches_a_sync_handler_and_no_result_is_reported(
    server: Deployment, client: JobClient, model: str
) -> None:
    started = threading.Event()
    saw_cancel = threading.Event()

    def waits_for_cancel(ctx: JobContext) -> str:
        started.set()
        if ctx.cancel_event.wait(10) and ctx.cancelled:
            saw_cancel.set()
        return "should not be stored"

    async with running_worker(server.worker_target, model, waits_for_cancel):
        job = await client.submit(model, b"x")
        assert await asyncio.to_thread(started.wait, 5)
        await client.cancel(job.id, "test")
        assert await asyncio.to_thread(saw_cancel.wait, 5)

    done = await client.get(job.id)
    assert done.status == job_pb2.JOB_STATUS_CANCELLED
    assert done.result == b""


async def test_cancel_cancels_an_async_handler(
    server: Deployment, client: JobClient, model: str
) -> None:
    started = asyncio.Event()
    interrupted = asyncio.Event()

    async def sleeper(ctx: JobContext) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            interrupted.set()
            raise
        return "too late"

    async with running_worker(server.worker_target, model, sleeper):
        job = await client.submit(model, b"x")
        await asyncio.wait_for(started.wait(), 5)
        await client.cancel(job.id)
        await asyncio.wait_for(interrupted.wait(), 5)


async def test_a_handler_exception_fails_the_job_with_handler_error(
    server: Deployment, client: JobClient, model: str
) -> None:
    def broken(ctx: JobContext) -> str:
        raise ValueError("bad input")

    async with running_worker(server.worker_target, model, broken):
        job = await client.submit(model, b"x", max_attempts=3)
        done = await finished(client, job.id)

    assert done.status == job_pb2.JOB_STATUS_FAILED
    assert done.error_code == "HANDLER_ERROR"
    assert "ValueError: bad input" in done.error_message
    assert done.attempts == 1  # a plain exception is not retried


async def test_a_long_non_ascii_handler_message_still_fails_the_job(
    server: Deployment, client: JobClient, model: str
) -> None:
    def shouts(ctx: JobContext) -> str:
        raise ValueError("\N{PILE OF POO}" * 3000)  # 4 bytes a character

    async with running_worker(server.worker_target, model, shouts):
        job = await client.submit(model, b"x", max_attempts=1)
        done = await finished(client, job.id)

    assert (done.status, done.error_code) == (job_pb2.JOB_STATUS_FAILED, "HANDLER_ERROR")
    assert done.error_message.startswith("ValueError: \N{PILE OF POO}")


async def test_a_retryable_error_with_a_malformed_code_is_still_reported(
    server: Deployment, client: JobClient, model: str
) -> None:
    def busy(ctx: JobContext) -> str:
        raise RetryableError("GPU busy", error_code="gpu-busy")

    async with running_worker(server.worker_target, model, busy):
        job = await client.submit(model, b"x", max_attempts=1)
        done = await finished(client, job.id)

    # Reported at once (its last attempt, hence exhausted), not left to the lease.
    assert (done.status, done.error_code) == (job_pb2.JOB_STATUS_FAILED, "ATTEMPTS_EXHAUSTED")
    assert "RESULT_REJECTED: RetryableError: GPU busy" in done.error_message


async def test_retryable_error_is_retried_until_it_succeeds(
    server: Deployment, client: JobClient, model: str
) -> None:
    def flaky(ctx: JobContext) -> str:
        if ctx.attempt < 2:
            raise RetryableError("GPU busy")
        return f"ok on attempt {ctx.attempt}"

    async with running_worker(server.worker_target, model, flaky):
        job = await client.submit(model, b"x", max_attempts=3)
        done = await finished(client, job.id)

    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert done.result == b"ok on attempt 2"


async def test_the_worker_keeps_serving_after_a_handler_fails(
    server: Deployment, client: JobClient, model: str
) -> None:
    def picky(ctx: JobContext) -> bytes:
        if ctx.payload == b"bad":
            raise RuntimeError("boom")
        return ctx.payload

    async with running_worker(server.worker_target, model, picky):
        bad = await client.submit(model, b"bad")
        await finished(client, bad.id)
        good = await client.submit(model, b"good")
        done = await finished(client, good.id)

    assert done.status == job_pb2.JOB_STATUS_COMPLETED
    assert done.result == b"good"


async def test_a_handler_calling_sys_exit_only_fails_its_job(
    server: Deployment, client: JobClient, model: str
) -> None:
    def exits(ctx: JobContext) -> bytes:
        if ctx.payload == b"exit":
            raise SystemExit(3)
        return ctx.payload

    async with running_worker(server.worker_target, model, exits):
        first = await finished(client, (await client.submit(model, b"exit")).id)
        second = await finished(client, (await client.submit(model, b"fine")).id)

    assert (first.status, first.error_code) == (job_pb2.JOB_STATUS_FAILED, "HANDLER_ERROR")
    assert "SystemExit" in first.error_message
    assert second.status == job_pb2.JOB_STATUS_COMPLETED


async def test_results_of_each_type_are_stored_with_a_content_type(
    server: Deployment, client: JobClient, model: str
) -> None:
    def typed(ctx: JobContext) -> object:
        kind = ctx.payload.decode()
        if kind == "json":
            ctx.result_content_type = "application/json"
            return '{"a": 1}'
        return {"str": "text", "bytes": b"\x00\x01", "none": None, "int": 42}[kind]

    outcomes: dict[str, job_pb2.Job] = {}
    async with running_worker(server.worker_target, model, typed, concurrency=4):
        jobs = {
            kind: await client.submit(model, kind)
            for kind in ("str", "bytes", "none", "int", "json")
        }
        for kind, job in jobs.items():
            outcomes[kind] = await finished(client, job.id)

    assert (outcomes["str"].result, outcomes["str"].result_content_type) == (
        b"text",
        "text/plain; charset=utf-8",
    )
    assert outcomes["bytes"].result == b"\x00\x01"
    assert outcomes["bytes"].result_content_type == "application/octet-stream"
    assert outcomes["none"].status == job_pb2.JOB_STATUS_COMPLETED
    assert outcomes["none"].result == b""
    assert outcomes["json"].result_content_type == "application/json"
    assert outcomes["int"].status == job_pb2.JOB_STATUS_FAILED
    assert "expected bytes, str or None" in outcomes["int"].error_message


async def test_concurrency_runs_that_many_jobs_at_once(
    server: Deployment, client: JobClient, model: str
) -> None:
    both_running = threading.Barrier(2, timeout=5)

    def rendezvous(ctx: JobContext) -> str:
        both_running.wait()  # breaks (BrokenBarrierError) unless two jobs run together
        return "met"

    async with running_worker(server.worker_target, model, rendezvous, concurrency=2):
        first = await client.submit(model, b"1")
        second = await client.submit(model, b"2")
        results = [await finished(client, job.id) for job in (first, second)]

    assert [job.status for job in results] == [job_pb2.JOB_STATUS_COMPLETED] * 2


async def test_a_lost_lease_stops_the_job_without_a_result(
    server: Deployment, client: JobClient, model: str
) -> None:
    saw_stop = threading.Event()

    def overruns(ctx: JobContext) -> str:
        if ctx.cancel_event.wait(10):
            saw_stop.set()
        return "late"

    async with running_worker(server.worker_target, model, overruns):
        # The run timeout ends the attempt on the server; the next heartbeat hears LEASE_LOST.
        job = await client.submit(model, b"x", max_attempts=1, run_timeout=0.5)
        done = await finished(client, job.id)
        assert await asyncio.to_thread(saw_stop.wait, 5)

    assert done.status == job_pb2.JOB_STATUS_FAILED
    assert done.error_code != "HANDLER_ERROR"  # the server's verdict, not the late handler's
    assert (await client.get(job.id)).result == b""


async def test_a_job_leased_again_to_the_same_worker_stops_its_older_attempt(
    tmp_path: Path, model: str
) -> None:
    # A long lease (beats 10 s apart) and a quick retry: the worker's free slot
    # claims the attempt the run timeout requeued while the first attempt's
    # handler still runs, long before that attempt's next heartbeat. The older
    # attempt must be told to stop then (its lease is gone), not left running
    # beside the new one.
    settings = {**SERVER_SETTINGS, "lease-timeout": "30", "retry-backoff": "0.05"}
    first_stopped = threading.Event()

    def overruns(ctx: JobContext) -> str:
        if ctx.cancel_event.wait(20) and ctx.attempt == 1:
            first_stopped.set()
        return "late"

    with contextlib.closing(started(tmp_path, settings)) as deployments:
        deployment = next(deployments)
        async with (
            JobClient(deployment.job_target, timeout=10.0) as client,
            running_worker(deployment.worker_target, model, overruns, concurrency=2),
        ):
            job = await client.submit(model, b"x", max_attempts=2, run_timeout=0.5)
            assert (await finished(client, job.id)).attempts == 2
            assert await asyncio.to_thread(first_stopped.wait, 5)


async def test_pointing_the_worker_at_the_job_service_exits_with_an_error(
    server: Deployment, model: str
) -> None:
    worker = Worker(worker_config(server.job_target, model), lambda ctx: None)

    assert await asyncio.wait_for(worker.run(), 10) == 1
