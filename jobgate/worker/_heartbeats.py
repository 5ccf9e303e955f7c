"""One heartbeat scheduler per worker: every held job's lease, batched (issue 11).

Each held job has a next due time, a third of its lease after its last
accepted beat, or sooner (at most once per `progress_interval`) when its
handler reported progress. When the earliest is due, one ReportAndClaim
(max_jobs 0) beats every job that is due or will be within half its
interval: a beat a little early is safe, a late one is not. The daemon's
transport sends them (jobgate/worker/_transport.py): a server without
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

from jobgate.errors import JobgateError
from jobgate.v1 import worker_service_pb2 as pb
from jobgate.v1.limits import MAX_REPORTS_PER_CALL
from jobgate.worker._context import JobContext
from jobgate.worker._link import Link, backoff
from jobgate.worker._transport import Applied, Missed, Refused, Transport

log = logging.getLogger("jobgate.worker")


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

    def __init__(self, *, link: Link, progress_interval: float = 0.5) -> None:
        self._link = link
        self._progress_interval = progress_interval
        #: By lease id: a worker may briefly hold two attempts of one job (the
        #: server re-leased it after a run timeout); each keeps its own beats.
        self._leases: dict[str, _Lease] = {}
        self._wake = asyncio.Event()
        self._transport: Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, transport: Transport) -> None:
        self._transport = transport
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
        assert self._transport is not None and self._loop is not None
        requests = [self._request(lease) for lease in batch]
        sent = self._loop.time()
        answers = await self._transport.heartbeat(requests, [_timeout(lease) for lease in batch])
        for lease, answer in zip(batch, answers, strict=True):
            if not self._holds(lease):
                continue  # reported or abandoned meanwhile: this answer is moot
            if isinstance(answer, Refused):
                self._abandon(lease, answer.why)
            elif isinstance(answer, Missed):
                self._failed(lease, answer.error)
            else:
                self._applied(lease, sent, answer)

    def _request(self, lease: _Lease) -> pb.HeartbeatRequest:
        assert self._loop is not None
        lease.progressed = False  # cleared before reading, so a later report is not lost
        lease.last_sent = self._loop.time()
        progress, stage = lease.job.ctx.progress
        return pb.HeartbeatRequest(
            job_id=lease.job.job_id, lease_id=lease.job.lease_id, progress=progress, stage=stage
        )

    def _holds(self, lease: _Lease) -> bool:
        return self._leases.get(lease.job.lease_id) is lease

    def _applied(self, lease: _Lease, sent: float, answer: Applied) -> None:
        self._link.ok()
        if answer.cancel_requested:
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


def _timeout(lease: _Lease) -> float:
    """How long one beat may take: its interval, at least a second."""
    return max(1.0, lease.interval)
