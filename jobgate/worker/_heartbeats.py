"""One heartbeat scheduler per worker: every held job's lease, batched (issue 11).

Each held job has a next due time, a third of its lease after its last
accepted beat, or sooner (at most once per `progress_interval`) when its
handler reported progress. When the earliest is due, one ReportAndClaim
(max_jobs 0) beats every job that is due or will be within half its
interval: a beat a little early is safe, a late one is not. A server without
ReportAndClaim gets one unary Heartbeat per due job from the same loop.

The loop runs on the daemon's event loop, never on a handler's thread, so a
CPU-bound handler cannot starve it (BullMQ#3183). Each beat sends only the
latest progress and stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Protocol

import grpc

from jobgate.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    JobgateError,
    JobNotFoundError,
    error_from_rpc,
)
from jobgate.v1 import worker_service_pb2 as pb
from jobgate.v1 import worker_service_pb2_grpc
from jobgate.v1.limits import MAX_REPORTS_PER_CALL
from jobgate.worker._context import JobContext
from jobgate.worker._link import Link, backoff

log = logging.getLogger("jobgate.worker")

_ABANDONING = {
    pb.REPORT_OUTCOME_LEASE_LOST: "heartbeat answered LEASE_LOST",
    pb.REPORT_OUTCOME_JOB_NOT_FOUND: "heartbeat answered JOB_NOT_FOUND",
    pb.REPORT_OUTCOME_JOB_CANCELLED: "cancelled by request",
}


class Held(Protocol):
    """What the scheduler needs of a job it keeps alive (a JobRun)."""

    job_id: str
    lease_id: str
    ctx: JobContext
    log_fields: dict[str, str]

    def abandon(self, why: str) -> None: ...


@dataclass
class _Lease:
    job: Held
    interval: float
    due: float
    last_sent: float
    failures: int = 0
    #: The handler reported progress since the last beat (set from its thread).
    progressed: bool = False


class Heartbeats:
    """Keeps the leases of all jobs a worker holds alive, in as few calls as it can."""

    def __init__(
        self,
        *,
        worker_id: str,
        metadata: tuple[tuple[str, str], ...],
        link: Link,
        progress_interval: float = 0.5,
    ) -> None:
        self._worker_id = worker_id
        self._metadata = metadata
        self._link = link
        self._progress_interval = progress_interval
        #: Beat through ReportAndClaim while the server has it.
        self.fast_path = True
        #: By lease id: a worker may briefly hold two attempts of one job (the
        #: server re-leased it after a run timeout); each keeps its own beats.
        self._leases: dict[str, _Lease] = {}
        self._wake = asyncio.Event()
        self._stub: worker_service_pb2_grpc.WorkerServiceAsyncStub | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, stub: worker_service_pb2_grpc.WorkerServiceAsyncStub) -> None:
        self._stub = stub
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name="heartbeats")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def hold(self, job: Held, lease: float) -> None:
        """Keep `job` alive from now on; its fresh lease lasts `lease` seconds."""
        now = asyncio.get_running_loop().time()
        interval = lease / 3
        self._leases[job.lease_id] = _Lease(job, interval, due=now + interval, last_sent=now)
        self._wake.set()

    def release(self, lease_id: str) -> None:
        """No more beats for this lease (reported, abandoned or handed back)."""
        self._leases.pop(lease_id, None)

    def held(self) -> list[str]:
        """The lease ids kept alive now (tests, debugging)."""
        return list(self._leases)

    def progressed(self, lease_id: str) -> None:
        """The handler reported progress: beat sooner. Safe from any thread."""
        lease = self._leases.get(lease_id)
        if lease is not None and not lease.progressed and self._loop is not None:
            lease.progressed = True
            with contextlib.suppress(RuntimeError):  # the loop closed under a stuck handler
                self._loop.call_soon_threadsafe(self._wake.set)

    def _due(self, lease: _Lease) -> float:
        if lease.progressed:
            return min(lease.due, lease.last_sent + self._progress_interval)
        return lease.due

    def _batch(self, now: float) -> list[_Lease]:
        """Every lease due now or within half its interval, most urgent first."""
        ready = [
            lease
            for lease in self._leases.values()
            if min(self._due(lease), lease.due - lease.interval / 2) <= now
        ]
        ready.sort(key=self._due)
        return ready[:MAX_REPORTS_PER_CALL]

    async def _run(self) -> None:
        assert self._loop is not None
        while True:
            self._wake.clear()
            now = self._loop.time()
            earliest = min(map(self._due, self._leases.values()), default=None)
            if earliest is None or earliest > now:
                timeout = None if earliest is None else earliest - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            try:
                await self._beat(self._batch(now))
            except Exception:  # a bug of ours must not stop every lease's beats
                log.exception("heartbeats failed unexpectedly; retrying")
                for lease in self._batch(now):
                    self._failed(lease, None)

    async def _beat(self, batch: list[_Lease]) -> None:
        requests = [self._request(lease) for lease in batch]
        if not self.fast_path:
            await self._beat_each(batch, requests)
            return
        assert self._stub is not None and self._loop is not None
        sent = self._loop.time()
        call = pb.ReportAndClaimRequest(worker_id=self._worker_id, heartbeats=requests)
        try:
            response = await self._stub.ReportAndClaim(
                call, timeout=_timeout(batch), metadata=self._metadata
            )
        except grpc.RpcError as rpc_error:
            error = error_from_rpc(rpc_error)
            if error.code == grpc.StatusCode.UNIMPLEMENTED:
                log.info("the worker server has no ReportAndClaim; heartbeating one by one")
                self.fast_path = False
            if isinstance(error, InvalidArgumentError) or not self.fast_path:
                # Alone, each beat's own answer says which job it was.
                await self._beat_each(batch, requests)
                return
            for lease in batch:
                self._failed(lease, error)
            return
        answers = {answer.job_id: answer for answer in response.heartbeats}
        for lease in batch:
            answer = answers.get(lease.job.job_id)
            if not self._holds(lease):
                continue  # reported or abandoned meanwhile: this answer is moot
            if answer is None or answer.outcome == pb.REPORT_OUTCOME_UNSPECIFIED:
                self._failed(lease, None)  # answered short: try this one again soon
            elif answer.outcome in _ABANDONING:
                self._abandon(lease, _ABANDONING[answer.outcome])
            else:
                self._applied(lease, sent, cancel_requested=answer.cancel_requested)

    def _request(self, lease: _Lease) -> pb.HeartbeatRequest:
        assert self._loop is not None
        lease.progressed = False  # cleared before reading, so a later report is not lost
        lease.last_sent = self._loop.time()
        progress, stage = lease.job.ctx.progress
        return pb.HeartbeatRequest(
            job_id=lease.job.job_id, lease_id=lease.job.lease_id, progress=progress, stage=stage
        )

    async def _beat_each(self, batch: list[_Lease], requests: list[pb.HeartbeatRequest]) -> None:
        """One unary Heartbeat per job, all at once."""
        await asyncio.gather(*map(self._beat_alone, batch, requests))

    async def _beat_alone(self, lease: _Lease, request: pb.HeartbeatRequest) -> None:
        assert self._stub is not None and self._loop is not None
        sent = self._loop.time()
        try:
            response = await self._stub.Heartbeat(
                request, timeout=_timeout([lease]), metadata=self._metadata
            )
        except grpc.RpcError as rpc_error:
            error = error_from_rpc(rpc_error)
            if not self._holds(lease):
                return
            if isinstance(error, FailedPreconditionError | JobNotFoundError):
                self._abandon(lease, f"heartbeat answered {error}")
            else:
                self._failed(lease, error)
            return
        if self._holds(lease):
            self._applied(lease, sent, cancel_requested=response.cancel_requested)

    def _holds(self, lease: _Lease) -> bool:
        return self._leases.get(lease.job.lease_id) is lease

    def _applied(self, lease: _Lease, sent: float, *, cancel_requested: bool) -> None:
        self._link.ok()
        if cancel_requested:
            self._abandon(lease, "cancelled by request")
            return
        lease.failures = 0
        lease.due = sent + lease.interval

    def _failed(self, lease: _Lease, error: JobgateError | None) -> None:
        assert self._loop is not None
        if error is not None:
            self._link.failed(error)
        lease.failures += 1
        # Keep trying, sooner than usual, while the lease may still be alive.
        lease.due = self._loop.time() + min(lease.interval, backoff(lease.failures))

    def _abandon(self, lease: _Lease, why: str) -> None:
        if why == "cancelled by request":
            log.info("job cancel requested by the gateway", extra=lease.job.log_fields)
        self.release(lease.job.lease_id)
        lease.job.abandon(why)


def _timeout(batch: list[_Lease]) -> float:
    return max(1.0, min(lease.interval for lease in batch))
