"""A claimed job's handler starts as the claim's answer is read (JobRun.begin).

The daemon calls begin() while it handles the answer, so a sync handler is
on its thread before the loop builds and sends its next claim. Started from
a task instead, it would wait for that call to go out (about 0.1 ms a job on
the latency path, docs/performance.md).
"""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from jobgate import JobContext
from jobgate.v1 import job_pb2, worker_service_pb2, worker_service_pb2_grpc
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


def job_run(handler: Handler, stub: RecordingStub, threads: HandlerThreads) -> JobRun:
    claimed = worker_service_pb2.ClaimedJob(lease_id="L1")
    claimed.job.id = "J1"
    claimed.lease_expire_time.FromNanoseconds(int((time.time() + 30) * 1e9))
    link = Link()
    return JobRun(
        claimed,
        stub=cast("worker_service_pb2_grpc.WorkerServiceAsyncStub", stub),
        handler=handler,
        threads=threads,
        metadata=(),
        worker_id="w1",
        link=link,
        heartbeats=Heartbeats(worker_id="w1", metadata=(), link=link),
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
