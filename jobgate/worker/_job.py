"""One claimed job inside the worker daemon: handler, result, and its lease.

The job's lease is kept alive by the worker's one heartbeat scheduler
(jobgate/worker/_heartbeats.py) from claim until its result is acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from jobgate.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    JobCancelledError,
    JobgateError,
    JobNotFoundError,
    RetryableError,
    error_from_rpc,
)
from jobgate.v1 import job_pb2, worker_service_pb2, worker_service_pb2_grpc
from jobgate.v1.errors import HANDLER_ERROR
from jobgate.v1.limits import MAX_ERROR_MESSAGE_BYTES, clip_utf8
from jobgate.worker._context import JobContext
from jobgate.worker._heartbeats import Heartbeats
from jobgate.worker._link import Link, backoff
from jobgate.worker._reports import Reports
from jobgate.worker._threads import HandlerThreads

log = logging.getLogger("jobgate.worker")

Handler = Callable[[JobContext], Any]

#: The shortest lease the heartbeat plans for (a third of it between beats).
MIN_LEASE = 0.3
#: error_code of an attempt whose report the server refused as invalid.
REJECTED = "RESULT_REJECTED"


@dataclass(frozen=True)
class Outcome:
    """What to report for an attempt."""

    status: job_pb2.JobStatus.ValueType
    result: bytes = b""
    result_content_type: str = ""
    error_code: str = ""
    error_message: str = ""
    retryable: bool = False

    @classmethod
    def failed(cls, code: str, message: str, *, retryable: bool = False) -> Outcome:
        return cls(
            job_pb2.JOB_STATUS_FAILED,
            error_code=code,
            error_message=clip_utf8(message, MAX_ERROR_MESSAGE_BYTES),
            retryable=retryable,
        )


def lease_length(claimed: worker_service_pb2.ClaimedJob) -> float:
    """Seconds the fresh lease lasts, safe against clock skew.

    The lease deadline is in the store's clock. Its distance from the job's
    update_time (stamped by the same clock at claim) and from the local clock
    are both estimates; the smaller positive one errs on the side of early
    heartbeats.
    """
    expire = claimed.lease_expire_time.ToNanoseconds() / 1e9
    estimates = [expire - time.time()]
    if claimed.job.HasField("update_time"):
        estimates.append(expire - claimed.job.update_time.ToNanoseconds() / 1e9)
    positive = [e for e in estimates if e > 0]
    return max(MIN_LEASE, min(positive)) if positive else MIN_LEASE


def is_async_handler(handler: Handler) -> bool:
    call = getattr(handler, "__call__", None)  # noqa: B004 (callable objects too)
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def to_outcome(value: object, ctx: JobContext) -> Outcome:
    """COMPLETED for bytes / str / None, else FAILED HANDLER_ERROR."""
    if value is None:
        return Outcome(job_pb2.JOB_STATUS_COMPLETED, result_content_type=ctx.result_content_type)
    if isinstance(value, str):
        content_type = ctx.result_content_type or "text/plain; charset=utf-8"
        return Outcome(job_pb2.JOB_STATUS_COMPLETED, value.encode(), content_type)
    if isinstance(value, bytes | bytearray | memoryview):
        content_type = ctx.result_content_type or "application/octet-stream"
        return Outcome(job_pb2.JOB_STATUS_COMPLETED, bytes(value), content_type)
    return Outcome.failed(
        HANDLER_ERROR,
        f"handler returned {type(value).__name__}; expected bytes, str or None",
    )


def start_in_thread(
    function: Handler, ctx: JobContext, threads: HandlerThreads
) -> asyncio.Future[Any]:
    """Hand a sync handler to a pooled daemon thread now; its value arrives in the future.

    A stuck handler holds only its own thread and never blocks the process's exit.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def body() -> None:
        try:
            value = function(ctx)
        except BaseException as error:  # reported as the job's outcome
            result: tuple[Any, BaseException | None] = (None, error)
        else:
            result = (value, None)
        # The loop may be closed by now (the daemon exited while a stuck
        # handler ran on): nobody waits for this answer any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, *result)

    try:
        threads.run(body)
    except BaseException as error:  # no thread could start: the job's outcome
        future.set_exception(error)
    return future


async def run_in_thread(function: Handler, ctx: JobContext, threads: HandlerThreads) -> Any:
    """Run a sync handler on a pooled daemon thread and await its value."""
    return await _settled(start_in_thread(function, ctx, threads))


async def _settled(running: asyncio.Future[Any]) -> Any:
    value = await running
    if inspect.isawaitable(value):  # a sync callable that returned a coroutine
        value = await value
    return value


class JobRun:
    """Runs one claimed job to its reported end."""

    def __init__(
        self,
        claimed: worker_service_pb2.ClaimedJob,
        *,
        stub: worker_service_pb2_grpc.WorkerServiceAsyncStub,
        handler: Handler,
        threads: HandlerThreads,
        reports: Reports | None = None,
        on_handler_done: Callable[[], None] | None = None,
        metadata: tuple[tuple[str, str], ...],
        worker_id: str,
        link: Link,
        heartbeats: Heartbeats,
    ) -> None:
        self.claimed = claimed
        self.job_id = claimed.job.id
        self.lease_id = claimed.lease_id
        self._stub = stub
        self._handler = handler
        self._threads = threads
        self._reports = reports
        self._on_handler_done = on_handler_done
        #: True once the handler returned: the job holds no handler slot any more.
        self.handler_done = False
        self._metadata = metadata
        self._link = link
        self._heartbeats = heartbeats
        #: job_id, tenant and model: on every log line about this job.
        self.log_fields = {
            "job_id": claimed.job.id,
            "tenant": claimed.job.tenant,
            "model": claimed.job.model,
        }
        #: What the handler's attempt came to, once it is known.
        self.outcome: Outcome | None = None
        #: Why the job must not be reported (lease lost, cancelled), once known.
        self.abandoned: str | None = None
        self._handler_task: asyncio.Task[Outcome] | None = None
        self._started = 0.0
        #: True once run() runs: a job task cancelled before its first step never does.
        self.entered = False
        self.ctx = JobContext(
            claimed.job,
            claimed.payload,
            lease_id=claimed.lease_id,
            worker_id=worker_id,
            on_report=self._on_report,
        )

    def _on_report(self) -> None:
        # Called from the handler's thread (or the loop): beat sooner.
        self._heartbeats.progressed(self.lease_id)

    def begin(self) -> None:
        """Hold the lease and start the handler: a sync one is on its thread on return.

        The daemon calls this as the claim's answer arrives, so the handler
        starts before the loop goes on to its next claim (on a task, it would
        start only after that call was built and sent). `run` then awaits it.
        A handler that cannot be started (its `__call__` cannot be looked up,
        no thread can start) fails the job as HANDLER_ERROR, in `run`.
        """
        if self._handler_task is not None:
            return
        self._started = time.monotonic()
        running: asyncio.Future[Any] | None
        try:
            self._heartbeats.hold(self, lease_length(self.claimed))
            running = None
            if not is_async_handler(self._handler):
                running = start_in_thread(self._handler, self.ctx, self._threads)
        except Exception as error:
            running = asyncio.get_running_loop().create_future()
            running.set_exception(error)
        self._handler_task = asyncio.create_task(self._invoke(running))

    async def run(self) -> None:
        """Run the handler while heartbeating; report the outcome unless abandoned."""
        self.entered = True
        try:
            self.begin()
            outcome = await self._outcome()
            self._handler_finished()
            if outcome is not None and self.abandoned is None:
                await self._set_result(outcome)
                status = job_pb2.JobStatus.Name(outcome.status).removeprefix("JOB_STATUS_")
                fields = {**self.log_fields, "seconds": round(time.monotonic() - self._started, 3)}
                if outcome.error_code:
                    fields |= {
                        "error_code": outcome.error_code,
                        "error_message": outcome.error_message,
                        "retryable": outcome.retryable,
                    }
                # One line per failed job; a completed one only at DEBUG (hot path).
                level = logging.INFO if outcome.error_code else logging.DEBUG
                log.log(level, "job %s", status.lower(), extra=fields)
        except asyncio.CancelledError:
            await self._report_shutdown()
            raise
        finally:
            self._heartbeats.release(self.lease_id)
        if self.abandoned is not None:
            log.info(
                "job stopped without a result", extra={**self.log_fields, "why": self.abandoned}
            )

    def _handler_finished(self) -> None:
        self.handler_done = True
        if self._on_handler_done is not None:
            self._on_handler_done()

    async def _outcome(self) -> Outcome | None:
        assert self._handler_task is not None
        try:
            return await self._handler_task
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.abandoned is not None and task is not None and not task.cancelling():
                return None  # we cancelled the async handler ourselves
            raise

    async def _invoke(self, running: asyncio.Future[Any] | None) -> Outcome:
        """The handler's outcome: `running` is a sync handler's started thread, else None."""
        ctx = self.ctx
        try:
            if running is None:
                value = await self._handler(ctx)
            else:
                value = await _settled(running)
        except RetryableError as error:
            return Outcome.failed(error.error_code, _describe(error), retryable=True)
        except JobCancelledError:
            if ctx.cancelled:
                raise asyncio.CancelledError from None
            return Outcome.failed(HANDLER_ERROR, "JobCancelledError raised but not cancelled")
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # SystemExit from a handler must not end the daemon
            return Outcome.failed(HANDLER_ERROR, _describe(error))
        return to_outcome(value, ctx)

    def abandon(self, why: str) -> None:
        """Stop the job without reporting it: its lease is lost or it was cancelled."""
        if self.abandoned is None:
            self.abandoned = why
            self.ctx._cancel()
            if self._handler_task is not None and is_async_handler(self._handler):
                self._handler_task.cancel()

    def _request(self, outcome: Outcome) -> worker_service_pb2.SetResultRequest:
        return worker_service_pb2.SetResultRequest(
            job_id=self.job_id,
            lease_id=self.lease_id,
            status=outcome.status,
            result=outcome.result,
            result_content_type=outcome.result_content_type,
            error_code=outcome.error_code,
            error_message=outcome.error_message,
            retryable=outcome.retryable,
        )

    async def _set_result(self, outcome: Outcome) -> None:
        """Report the outcome: with the next ReportAndClaim where the fast path takes it."""
        self.outcome = outcome
        if self._reports is not None:
            answer = await self._reports.submit(self._request(outcome))
            if answer == worker_service_pb2.REPORT_OUTCOME_APPLIED:
                return
            if answer is not None:
                name = worker_service_pb2.ReportOutcome.Name(answer)
                self.abandoned = f"result refused: {name.removeprefix('REPORT_OUTCOME_')}"
                return
        await self._set_result_alone(outcome)

    async def _set_result_alone(self, outcome: Outcome) -> None:
        """SetResult, retried until acknowledged (idempotent for the same lease and outcome)."""
        failures = 0
        while self.abandoned is None:
            self.outcome = outcome
            request = self._request(outcome)
            try:
                await self._stub.SetResult(request, timeout=10.0, metadata=self._metadata)
                self._link.ok()
                return
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error)
            if isinstance(error, FailedPreconditionError | JobNotFoundError):
                self.abandoned = f"result refused: {error}"
                return
            if isinstance(error, InvalidArgumentError) and outcome.error_code != REJECTED:
                # e.g. a result over the size cap or a malformed error_code from
                # a RetryableError: the attempt still has to end, now.
                outcome = _rejected(outcome, error)
                continue
            if isinstance(error, InvalidArgumentError):
                log.error("job result refused: %s", error, extra=self.log_fields)
                return
            failures += 1
            self._link.failed(error)
            await asyncio.sleep(backoff(failures))

    async def _report_shutdown(self) -> None:
        """The daemon gave up on this job at shutdown: report it at once, best effort.

        A finished job's own outcome is sent (its SetResult may have been in
        flight); an unfinished one is handed back as a retryable failure so
        another worker takes it without waiting for the lease to expire.
        """
        if self.abandoned is not None:
            return
        outcome = self.outcome or Outcome.failed(
            "WORKER_SHUTDOWN", "the worker shut down before the job finished", retryable=True
        )
        self.abandon("worker shut down before the job was reported")
        request = self._request(outcome)
        # Failing that, the lease expires and the job is requeued anyway.
        with contextlib.suppress(grpc.RpcError, asyncio.CancelledError):
            await asyncio.shield(
                self._stub.SetResult(request, timeout=2.0, metadata=self._metadata)
            )


def _rejected(outcome: Outcome, error: JobgateError) -> Outcome:
    """The report to send when the server refused `outcome` as invalid."""
    why = (
        f"{outcome.error_message} (report refused: {error})"
        if outcome.error_message
        else str(error)
    )
    return Outcome.failed(REJECTED, why, retryable=outcome.retryable)


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
