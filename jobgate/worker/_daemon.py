"""The GPU-host worker daemon: `jobgate worker --target HOST:PORT --model M --handler mod:fn`.

It long-polls for up to `concurrency` jobs at a time, runs the handler for
each (see jobgate.JobContext and docs/handlers.md), keeps every held job's
lease alive with one heartbeat scheduler (all due jobs in one call, a third
of the lease apart), and reports each outcome, retried until acknowledged.
How those calls travel is its transport's business (jobgate/worker/
_transport.py: ReportAndClaim, or the classic ClaimNext, Heartbeat and
SetResult for a server without it). A handler can never kill the daemon.

Lifecycle (Faktory's quiet/terminate): SIGTERM or SIGINT stops claiming, lets
in-flight jobs finish for `grace_period` seconds, hands back what is still
running as a retryable failure, and exits 0. A second signal skips the wait.
When the worker server is unreachable the daemon keeps running the jobs it
holds, retries heartbeats and results, and re-polls with jittered back-off.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from jobgate._race import unless_set
from jobgate.client._channel import ConnectionConfig
from jobgate.errors import JobgateError
from jobgate.v1 import worker_service_pb2, worker_service_pb2_grpc
from jobgate.v1.limits import MAX_JOBS_PER_CLAIM
from jobgate.worker._heartbeats import Heartbeats
from jobgate.worker._job import Handler, JobRun
from jobgate.worker._link import Link, backoff
from jobgate.worker._reports import Pending, Reports
from jobgate.worker._threads import HandlerThreads
from jobgate.worker._transport import Caller, Transport, Wire

log = logging.getLogger("jobgate.worker")
T = TypeVar("T")

DEFAULT_WORKER_TARGET = "127.0.0.1:50052"
#: The longest claim long-poll the server allows is 60 s; 30 s keeps
#: idle workers cheap while noticing a dead connection reasonably soon.
CLAIM_WAIT = 30.0
#: An empty claim answer quicker than this was not a real long poll.
EARLY_EMPTY_ANSWER = 0.05
#: After an answer that filled every free slot the queue likely has more, so
#: the next claim should come back at once: results that finish meanwhile wait
#: for it (and ride the call after) instead of going in a call of their own,
#: unless it is still out after this long, when it is likely a real long poll.
#: In a prefilled drain at concurrency 8 this took script calls per job from
#: 0.60 to 0.36 (docs/worker-fast-path.md, "Results held behind a prompt claim").
REPORT_HOLD = 0.005

# Codes that mean "this worker is misconfigured": retrying will not help.
_FATAL_CODES = {
    grpc.StatusCode.UNAUTHENTICATED: "the worker server refused the token",
    grpc.StatusCode.PERMISSION_DENIED: "the token does not have the worker role",
    grpc.StatusCode.INVALID_ARGUMENT: "the worker server refused the claim request",
    grpc.StatusCode.UNIMPLEMENTED: (
        "the target does not serve jobgate.v1.WorkerService "
        "(is it the JobService port? `jobgate serve` serves workers on 127.0.0.1:50052)"
    ),
}


def default_worker_id() -> str:
    """hostname-pid: unique per process and readable in the job's worker_id."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class WorkerConfig:
    """Everything the daemon needs; built once from flags or by the caller."""

    models: tuple[str, ...]
    connection: ConnectionConfig = field(
        default_factory=lambda: ConnectionConfig(target=DEFAULT_WORKER_TARGET)
    )
    concurrency: int = 1
    #: The pool this worker serves; "" means its credential's (`default` without auth).
    pool: str = ""
    worker_id: str = field(default_factory=default_worker_id)
    grace_period: float = 30.0
    claim_wait: float = CLAIM_WAIT
    #: Reported progress is pushed at most this often (besides the lease heartbeats).
    progress_interval: float = 0.5


class HandlerLoadError(JobgateError):
    """`--handler` does not name an importable callable."""


def load_handler(spec: str) -> Handler:
    """Import `module:function` (or `path/to/file.py:function`).

    The current directory is importable, as with gunicorn and uvicorn, so
    `--handler examples.handlers:text_stats` works from a checkout.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise HandlerLoadError(f"--handler must look like module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            loaded = importlib.util.spec_from_file_location(path.stem, path)
            if loaded is None or loaded.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except Exception as error:
        raise HandlerLoadError(f"cannot import {module_name!r}: {error}") from error
    handler = module
    for part in attribute.split("."):
        handler = getattr(handler, part, None)  # type: ignore[assignment]
        if handler is None:
            raise HandlerLoadError(f"{module_name!r} has no attribute {attribute!r}")
    if not callable(handler):
        raise HandlerLoadError(f"{spec} is not callable")
    return handler


class Worker:
    """The daemon. `await Worker(config, handler).run()` returns the exit code."""

    def __init__(self, config: WorkerConfig, handler: Handler) -> None:
        if not config.models:
            raise ValueError("a worker needs at least one model")
        if config.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.config = config
        self.handler = handler
        #: Job tasks and runs by lease id (one job may be held twice, briefly).
        self.active: dict[str, asyncio.Task[None]] = {}
        self.claimed_total = 0
        self._link = Link()
        #: Sync handlers run here; threads are reused from job to job.
        self.threads = HandlerThreads(name="handler")
        self._runs: dict[str, JobRun] = {}
        #: Results waiting to ride with a call (while the transport carries them).
        self._reports = Reports(on_submit=self._result_ready)
        self._heartbeats = Heartbeats(link=self._link, progress_interval=config.progress_interval)
        self._wire: Wire | None = None
        self._polling = False  # the claim loop sits in a long poll
        self._backlog = False  # the last answer filled every slot it asked for
        self._claiming = True  # the claim loop runs (it takes pending results)
        self._flusher: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._force = asyncio.Event()
        self._wakeup = asyncio.Event()  # a handler slot freed or a result is pending
        self._exit_code = 0

    @property
    def transport(self) -> Transport | None:
        """The transport in use (None before `run` opened the channel)."""
        return None if self._wire is None else self._wire.transport

    def stop(self) -> None:
        """Begin draining (first call); skip the grace period (second call)."""
        if self._stopping.is_set():
            log.warning("second stop signal: not waiting for in-flight jobs")
            self._force.set()
        else:
            log.info(
                "stopping: no new claims; waiting up to %.0fs for %d in-flight job(s)",
                self.config.grace_period,
                len(self.active),
            )
            self._stopping.set()

    async def run(self) -> int:
        """Claim and run jobs until stopped; then drain and return the exit code."""
        connection = self.config.connection
        channel = connection.open_channel()
        stub = worker_service_pb2_grpc.WorkerServiceStub(channel)
        log.info(
            "worker %s serving models %s on %s (concurrency %d)",
            self.config.worker_id,
            ",".join(self.config.models),
            connection.target,
            self.config.concurrency,
        )
        caller = Caller(
            stub,
            worker_id=self.config.worker_id,
            models=list(self.config.models),
            metadata=connection.metadata,
            pool=self.config.pool,
        )
        self._wire = Wire(caller, reports=self._reports)
        self._heartbeats.start(self._wire)
        try:
            await self._claim_loop(stub)
            self._claiming = False
            self._flush()
            await self._drain()
        finally:
            if self._flusher is not None:
                self._flusher.cancel()
            await self._heartbeats.stop()
            await channel.close(grace=None)
        log.info("worker %s stopped", self.config.worker_id)
        return self._exit_code

    async def _claim_loop(self, stub: worker_service_pb2_grpc.WorkerServiceAsyncStub) -> None:
        failures = 0
        while not self._stopping.is_set():
            self._wakeup.clear()
            free = self._free_slots()
            results = self._reports.take()
            if free <= 0 and not results:
                await self._until_stopping(self._wakeup.wait())
                continue
            polled = time.monotonic()
            try:
                jobs = await self._exchange(results, min(free, MAX_JOBS_PER_CLAIM))
            except JobgateError as error:
                if error.code in _FATAL_CODES:
                    log.error("%s: %s", _FATAL_CODES[error.code], error)
                    self._exit_code = 1
                    self._stopping.set()
                    return
                failures += 1
                self._link.failed(error)
                await self._until_stopping(asyncio.sleep(backoff(failures, cap=10.0)))
                continue
            except Exception:  # a bug must not end the daemon while it holds jobs
                failures += 1
                log.exception("claim failed unexpectedly; retrying with back-off")
                await self._until_stopping(asyncio.sleep(backoff(failures, cap=10.0)))
                continue
            if jobs is None:
                return  # stopping while the poll was open
            failures = 0
            self._link.ok()
            for claimed in jobs:
                self._start(stub, claimed)
            if not jobs and not results and time.monotonic() - polled < EARLY_EMPTY_ANSWER:
                # An empty answer long before `wait` (a draining server): don't spin.
                await self._until_stopping(asyncio.sleep(backoff(1)))

    def _free_slots(self) -> int:
        """Handler slots not in use: a job whose handler returned holds none."""
        return self.config.concurrency - sum(not run.handler_done for run in self._runs.values())

    async def _exchange(
        self, results: list[Pending], max_jobs: int
    ) -> Sequence[worker_service_pb2.ClaimedJob] | None:
        """Report `results` and claim up to max_jobs; None when a stop cut the poll."""
        assert self._wire is not None
        # Only a call that claims long-polls; its results were applied before
        # the wait began (the answers come back with the next job; a stop cuts
        # the poll and the flush sends them again).
        wait = self.config.claim_wait if max_jobs > 0 else 0.0
        call = asyncio.ensure_future(self._wire.claim(results, max_jobs, wait))
        hold: asyncio.TimerHandle | None = None
        if wait > 0 and self._backlog:
            hold = asyncio.get_running_loop().call_later(REPORT_HOLD, self._start_polling)
        elif wait > 0:
            self._start_polling()
        try:
            finished, jobs = await self._unless_stopping(call)
        finally:
            if hold is not None:
                hold.cancel()
            self._polling = False
        if not finished:
            # The flush sends them again, which is safe: a repeated result is APPLIED.
            self._reports.put_back(results)
            return None
        assert jobs is not None
        self._backlog = 0 < max_jobs <= len(jobs)
        return jobs

    def _start_polling(self) -> None:
        """The claim call is (likely) a long poll: results that finish go on their own."""
        self._polling = True
        self._flush()

    def _result_ready(self) -> None:
        self._wakeup.set()
        if self._polling or not self._claiming:
            self._flush()

    def _flush(self) -> None:
        """Send pending results on their own while the claim loop cannot take them."""
        if self._wire is None or not len(self._reports):
            return
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_loop(self._wire), name="report-flush")

    async def _flush_loop(self, wire: Wire) -> None:
        failures = 0
        while len(self._reports) and (self._polling or not self._claiming):
            results = self._reports.take()
            # Not cut short by a stop: during the drain these are the answers
            # the in-flight jobs wait for.
            call = asyncio.ensure_future(wire.report(results))
            await asyncio.wait({call})
            try:
                call.result()
            except JobgateError as error:
                failures += 1
                self._link.failed(error)
                await asyncio.sleep(backoff(failures))
                continue
            failures = 0

    def _start(
        self,
        stub: worker_service_pb2_grpc.WorkerServiceAsyncStub,
        claimed: worker_service_pb2.ClaimedJob,
    ) -> None:
        self.claimed_total += 1
        job = claimed.job
        fields = {"job_id": job.id, "tenant": job.tenant, "model": job.model}
        log.debug("job claimed", extra={**fields, "attempt": job.attempts})
        run = JobRun(
            claimed,
            stub=stub,
            handler=self.handler,
            threads=self.threads,
            reports=self._reports,
            on_handler_done=self._wakeup.set,
            metadata=self.config.connection.metadata,
            worker_id=self.config.worker_id,
            link=self._link,
            heartbeats=self._heartbeats,
        )
        for older in [r for r in self._runs.values() if r.job_id == job.id]:
            # The server leased this job again (its run timeout or lease ran
            # out): the older attempt's lease is gone, so its handler stops now
            # instead of waiting for a heartbeat that no longer names it.
            older.abandon("the job was leased again: this attempt's lease is gone")
        lease_id = claimed.lease_id
        run.begin()  # the handler starts now, not after the next claim is built and sent
        task = asyncio.create_task(self._guarded(run), name=f"job-{job.id}")
        self.active[lease_id] = task
        self._runs[lease_id] = run
        task.add_done_callback(lambda _: self._finished(lease_id))

    async def _guarded(self, run: JobRun) -> None:
        try:
            await run.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug of ours must not kill the daemon either
            log.exception("job: unexpected worker error", extra=run.log_fields)

    def _finished(self, lease_id: str) -> None:
        self.active.pop(lease_id, None)
        run = self._runs.pop(lease_id, None)
        if run is not None and not run.entered:
            # Cancelled before its first step (_drain yields first, so this is
            # a backstop): its handler began all the same. No more beats; the
            # lease runs out and the server hands the job out again.
            run.abandon("the worker stopped before the job's task ran")
            self._heartbeats.release(lease_id)
        self._wakeup.set()

    async def _until_stopping(self, waiting: Coroutine[Any, Any, Any]) -> None:
        """Await `waiting` unless a stop comes first."""
        await self._unless_stopping(waiting)

    async def _unless_stopping(self, waiting: Awaitable[T]) -> tuple[bool, T | None]:
        """(True, result) of `waiting`, or (False, None) when a stop came first
        and cancelled it (a call cut that way may raise RpcError: not an error)."""
        return await unless_set(self._stopping, waiting, quiet=(grpc.RpcError,))

    async def _drain(self) -> None:
        """Wait for in-flight jobs up to the grace period (or a second signal)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.grace_period
        pending = set(self.active.values())
        force = asyncio.ensure_future(self._force.wait())
        while pending and not self._force.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait(
                pending | {force}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            pending = {task for task in pending if not task.done()}
        force.cancel()
        if pending:
            log.warning("grace period over: handing back %d unfinished job(s)", len(pending))
            # A job claimed in the stop's own loop turn has not stepped into
            # JobRun.run yet, though its handler began: one turn lets it, so
            # the cancel below reaches run()'s hand-back instead of nothing.
            await asyncio.sleep(0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


def run_worker(config: WorkerConfig, handler: Handler) -> int:
    """Run the daemon in its own event loop with SIGTERM/SIGINT draining it."""

    async def main() -> int:
        worker = Worker(config, handler)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, worker.stop)
        return await worker.run()

    return asyncio.run(main())
