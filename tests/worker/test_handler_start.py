"""A claimed job's handler starts as the claim's answer is read (JobRun.begin).

The daemon calls begin() while it takes the answer, so a sync handler is on
its thread before the loop builds and sends its next claim (from a task, it
was handed over 0.30 ms after the answer at concurrency 8, now 0.11 ms:
docs/performance.md, "The latency path, hop by hop"). Starting early must
not cost a job its hand-back: one taken in the stop's own turn, or whose
task is cancelled before it ran, is neither left running unreported nor
beaten on forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any, cast

from jobgate import JobContext
from jobgate.v1 import job_pb2, worker_service_pb2, worker_service_pb2_grpc
from jobgate.worker import Worker, WorkerConfig
from jobgate.worker._heartbeats import Heartbeats
from jobgate.worker._job import Handler, JobRun
from jobgate.worker._link import Link
from jobgate.worker._threads import HandlerThreads


class RecordingStub:
    """Answers SetResult and keeps each request."""

    def __init__(self) -> None:
        self.results: list[worker_service_pb2.SetResultRequest] = []

    async def SetResult(
        self, request: worker_service_pb2.SetResultRequest, **_: Any
    ) -> worker_service_pb2.SetResultResponse:
        self.results.append(request)
        return worker_service_pb2.SetResultResponse()


class NoThreads(HandlerThreads):
    """A pool that can start no thread (the process is out of them)."""

    def run(self, work: Any) -> None:
        raise RuntimeError("can't start new thread")


def claimed_job() -> worker_service_pb2.ClaimedJob:
    """Job J1 under lease L1, 30 s to run."""
    claimed = worker_service_pb2.ClaimedJob(lease_id="L1")
    claimed.job.id = "J1"
    claimed.lease_expire_time.FromNanoseconds(int((time.time() + 30) * 1e9))
    return claimed


def job_run(handler: Handler, stub: RecordingStub, threads: HandlerThreads) -> JobRun:
    claimed = claimed_job()
    link = Link()
    return JobRun(
        claimed,
        stub=cast("worker_service_pb2_grpc.WorkerServiceAsyncStub", stub),
        handler=handler,
        threads=threads,
        metadata=(),
        worker_id="w1",
        link=link,
        heartbeats=Heartbeats(link=link),
    )


async def test_a_sync_handler_is_on_its_thread_when_begin_returns() -> None:
    started, release = threading.Event(), threading.Event()

    def handler(ctx: JobContext) -> str:
        started.set()
        release.wait(10)
        return "ok"

    stub = RecordingStub()
    run = job_run(handler, stub, HandlerThreads())
    run.begin()
    try:
        # This blocks the event loop: only a handler already on its thread
        # can set the event.
        assert started.wait(5)
    finally:
        release.set()
    await run.run()
    assert [r.status for r in stub.results] == [job_pb2.JOB_STATUS_COMPLETED]


async def test_run_after_begin_runs_the_handler_once() -> None:
    calls: list[str] = []

    def handler(ctx: JobContext) -> str:
        calls.append(ctx.job_id)
        return "ok"

    stub = RecordingStub()
    run = job_run(handler, stub, HandlerThreads())
    run.begin()
    run.begin()
    await run.run()
    assert calls == ["J1"]
    assert [r.result for r in stub.results] == [b"ok"]


async def test_a_handler_thread_that_cannot_start_fails_the_job_as_a_handler_error() -> None:
    stub = RecordingStub()
    run = job_run(lambda ctx: "never runs", stub, NoThreads())
    await run.run()
    [result] = stub.results
    assert result.status == job_pb2.JOB_STATUS_FAILED
    assert result.error_code == "HANDLER_ERROR"
    assert "can't start new thread" in result.error_message


class UnlookableCall:
    """A handler object whose `__call__` cannot even be looked up."""

    @property
    def __call__(self) -> Any:
        raise RuntimeError("no call for you")


async def test_a_handler_that_cannot_be_started_fails_the_job_and_holds_no_lease() -> None:
    stub = RecordingStub()
    run = job_run(cast(Handler, UnlookableCall()), stub, HandlerThreads())
    await run.run()
    [result] = stub.results
    assert result.error_code == "HANDLER_ERROR"
    assert "no call for you" in result.error_message
    assert run._heartbeats.held() == []


def stopping_worker(handler: Handler, stub: RecordingStub) -> Worker:
    """A daemon with no grace period, given one claimed job by hand."""
    worker = Worker(WorkerConfig(models=("m",), grace_period=0.0), handler)
    claimed = claimed_job()
    worker._start(cast("worker_service_pb2_grpc.WorkerServiceAsyncStub", stub), claimed)
    return worker


async def test_the_daemon_starts_the_handler_as_it_takes_the_claimed_job() -> None:
    started, release = threading.Event(), threading.Event()

    def handler(ctx: JobContext) -> str:
        started.set()
        release.wait(10)
        return "ok"

    worker = stopping_worker(handler, RecordingStub())
    try:
        assert started.wait(5)  # the loop is blocked: only the thread can set it
    finally:
        release.set()
    worker.stop()
    await worker._drain()


async def test_a_job_taken_in_the_stop_s_own_turn_is_handed_back_without_grace() -> None:
    release = threading.Event()
    stub = RecordingStub()
    worker = stopping_worker(lambda ctx: release.wait(10), stub)
    try:
        worker.stop()
        await worker._drain()  # no await between the claim and the cancel but its own
    finally:
        release.set()
    [result] = stub.results
    assert result.error_code == "WORKER_SHUTDOWN"
    assert result.retryable
    assert worker._heartbeats.held() == []


async def test_a_job_task_cancelled_before_its_first_step_is_beaten_no_more() -> None:
    release = threading.Event()
    worker = stopping_worker(lambda ctx: release.wait(10), RecordingStub())
    [task] = worker.active.values()
    task.cancel()  # before the task ever ran: run() never starts
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the done callbacks run
        assert worker._heartbeats.held() == []
    finally:
        release.set()
