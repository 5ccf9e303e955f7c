"""How the daemon talks to the WorkerService: one interface, two call shapes.

`FastPath` uses ReportAndClaim: finished jobs' results ride with the next
claim (or go in a call of their own, `max_jobs` 0, while the claim loop
cannot take them), and every due heartbeat goes in one call.
`Classic` uses the calls every client has: ClaimNext, one Heartbeat per held
job, and each job's own SetResult (JobRun sends it; the transport declines
the results it is handed).

`Wire` is the one in use, chosen once: FastPath from the start, and Classic
for good from the first UNIMPLEMENTED answer to ReportAndClaim (a server
from before it), whichever of the claim loop, the flush or the heartbeats
meets it. Nothing else in the daemon asks which one it has.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import grpc

from jobgate.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    JobgateError,
    JobNotFoundError,
    error_from_rpc,
)
from jobgate.v1 import worker_service_pb2 as pb
from jobgate.worker._reports import Pending, Reports

if TYPE_CHECKING:  # the async stub's type exists only in the .pyi
    from jobgate.v1.worker_service_pb2_grpc import WorkerServiceAsyncStub as Stub

log = logging.getLogger("jobgate.worker")

_STOPPING = {
    pb.REPORT_OUTCOME_LEASE_LOST: "heartbeat answered LEASE_LOST",
    pb.REPORT_OUTCOME_JOB_NOT_FOUND: "heartbeat answered JOB_NOT_FOUND",
    pb.REPORT_OUTCOME_JOB_CANCELLED: "cancelled by request",
}


@dataclass(frozen=True)
class Applied:
    """The heartbeat extended the lease."""

    cancel_requested: bool = False


@dataclass(frozen=True)
class Refused:
    """The lease is gone (lost, cancelled, no such job): the job must stop."""

    why: str


@dataclass(frozen=True)
class Missed:
    """The beat did not land (the server is unreachable, or answered short): try again soon."""

    error: JobgateError | None = None


Beat = Applied | Refused | Missed


class Transport(Protocol):
    """The daemon's three exchanges with the WorkerService."""

    async def claim(
        self, results: list[Pending], max_jobs: int, wait: float
    ) -> Sequence[pb.ClaimedJob]:
        """Report `results`, then claim up to `max_jobs` jobs, long-polling up to `wait`.

        Raises JobgateError when the call fails, the results it did not report
        put back for the next call. A cancelled call (a stop cut the poll)
        leaves `results` to the caller.
        """
        ...

    async def report(self, results: list[Pending]) -> None:
        """Report `results` without claiming (raises as `claim` does)."""
        ...

    async def heartbeat(
        self, requests: Sequence[pb.HeartbeatRequest], timeouts: Sequence[float]
    ) -> list[Beat]:
        """Extend each lease (`timeouts[i]`: how long request i may take); answers in order."""
        ...


@dataclass(frozen=True)
class Caller:
    """Who the daemon is on the wire: both transports send every call with these."""

    stub: Stub
    worker_id: str
    models: list[str]
    metadata: tuple[tuple[str, str], ...]
    # the pool this worker serves ("": its credential's; `default` in open mode)
    pool: str = ""


class Classic:
    """ClaimNext, Heartbeat and SetResult: what any WorkerService serves."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def claim(
        self, results: list[Pending], max_jobs: int, wait: float
    ) -> Sequence[pb.ClaimedJob]:
        Reports.decline(results)  # each job sends its own SetResult
        request = pb.ClaimNextRequest(
            worker_id=self._caller.worker_id,
            models=self._caller.models,
            max_jobs=max_jobs,
            pool=self._caller.pool,
        )
        request.wait.FromNanoseconds(int(wait * 1e9))
        # A stop cancels the poll. A job the server claimed in that very
        # instant is requeued when its lease expires.
        try:
            response = await self._caller.stub.ClaimNext(
                request, timeout=wait + 10.0, metadata=self._caller.metadata
            )
        except grpc.RpcError as rpc_error:
            raise error_from_rpc(rpc_error) from rpc_error
        return response.jobs

    async def report(self, results: list[Pending]) -> None:
        Reports.decline(results)  # each job sends its own SetResult

    async def heartbeat(
        self, requests: Sequence[pb.HeartbeatRequest], timeouts: Sequence[float]
    ) -> list[Beat]:
        """One unary Heartbeat per job, all at once."""
        return list(await asyncio.gather(*map(self._beat, requests, timeouts)))

    async def _beat(self, request: pb.HeartbeatRequest, timeout: float) -> Beat:
        try:
            response = await self._caller.stub.Heartbeat(
                request, timeout=timeout, metadata=self._caller.metadata
            )
        except grpc.RpcError as rpc_error:
            error = error_from_rpc(rpc_error)
            if isinstance(error, FailedPreconditionError | JobNotFoundError):
                return Refused(f"heartbeat answered {error}")
            return Missed(error)
        return Applied(cancel_requested=response.cancel_requested)


class FastPath:
    """ReportAndClaim: results and heartbeats batched into the calls the daemon makes anyway."""

    def __init__(
        self,
        caller: Caller,
        *,
        reports: Reports,
        alone: Classic,
        on_unimplemented: Callable[[], None],
    ) -> None:
        self._caller = caller
        self._reports = reports
        #: For items a batch could not carry (one of them refused as invalid).
        self._alone = alone
        self._on_unimplemented = on_unimplemented

    async def claim(
        self, results: list[Pending], max_jobs: int, wait: float
    ) -> Sequence[pb.ClaimedJob]:
        # Results ride with the long poll: the server applies them before it
        # waits, so at a near-empty queue a job costs one call, not two.
        request = pb.ReportAndClaimRequest(
            worker_id=self._caller.worker_id,
            models=self._caller.models,
            pool=self._caller.pool,
            max_jobs=max_jobs,
            results=[item.request for item in results],
        )
        request.wait.FromNanoseconds(int(wait * 1e9))
        try:
            response = await self._caller.stub.ReportAndClaim(
                request, timeout=wait + 10.0, metadata=self._caller.metadata
            )
        except grpc.RpcError as rpc_error:
            return self._failed(error_from_rpc(rpc_error), results)
        Reports.settle(results, list(response.results))
        return response.jobs

    async def report(self, results: list[Pending]) -> None:
        await self.claim(results, 0, 0.0)

    def _failed(self, error: JobgateError, results: list[Pending]) -> Sequence[pb.ClaimedJob]:
        if error.code == grpc.StatusCode.UNIMPLEMENTED:
            # A server without the fast path (or not a WorkerService at all:
            # ClaimNext, tried next, tells which). Its results go by SetResult.
            self._on_unimplemented()
            Reports.decline(results)
            return []
        if error.code == grpc.StatusCode.INVALID_ARGUMENT and results:
            # One of the results is refused as invalid; each goes alone, where
            # SetResult's answer says which and the attempt still ends.
            Reports.decline(results)
            return []
        self._reports.put_back(results)
        raise error

    async def heartbeat(
        self, requests: Sequence[pb.HeartbeatRequest], timeouts: Sequence[float]
    ) -> list[Beat]:
        call = pb.ReportAndClaimRequest(worker_id=self._caller.worker_id, heartbeats=requests)
        try:
            response = await self._caller.stub.ReportAndClaim(
                call, timeout=min(timeouts), metadata=self._caller.metadata
            )
        except grpc.RpcError as rpc_error:
            error = error_from_rpc(rpc_error)
            if error.code == grpc.StatusCode.UNIMPLEMENTED:
                self._on_unimplemented()
            if error.code == grpc.StatusCode.UNIMPLEMENTED or isinstance(
                error, InvalidArgumentError
            ):
                # Alone, each beat's own answer says which job it was.
                return await self._alone.heartbeat(requests, timeouts)
            return [Missed(error) for _ in requests]
        answers = {answer.job_id: answer for answer in response.heartbeats}
        return [_beat(answers.get(request.job_id)) for request in requests]


def _beat(answer: pb.HeartbeatAnswer | None) -> Beat:
    if answer is None or answer.outcome == pb.REPORT_OUTCOME_UNSPECIFIED:
        return Missed()  # answered short: try this one again soon
    if answer.outcome in _STOPPING:
        return Refused(_STOPPING[answer.outcome])
    return Applied(cancel_requested=answer.cancel_requested)


class Wire:
    """The transport in use: FastPath until the server turns out not to have it."""

    def __init__(self, caller: Caller, *, reports: Reports) -> None:
        self._reports = reports
        self._classic = Classic(caller)
        self.transport: Transport = FastPath(
            caller, reports=reports, alone=self._classic, on_unimplemented=self._fall_back
        )

    def _fall_back(self) -> None:
        if self.transport is not self._classic:
            log.info(
                "the worker server has no ReportAndClaim; using ClaimNext, Heartbeat and SetResult"
            )
            self.transport = self._classic
            self._reports.close()  # pending and later results go by SetResult

    async def claim(
        self, results: list[Pending], max_jobs: int, wait: float
    ) -> Sequence[pb.ClaimedJob]:
        return await self.transport.claim(results, max_jobs, wait)

    async def report(self, results: list[Pending]) -> None:
        await self.transport.report(results)

    async def heartbeat(
        self, requests: Sequence[pb.HeartbeatRequest], timeouts: Sequence[float]
    ) -> list[Beat]:
        return await self.transport.heartbeat(requests, timeouts)
