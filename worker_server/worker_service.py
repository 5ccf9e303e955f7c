"""WorkerService: authenticate, validate, call the store, convert. No state rules here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import grpc.aio

from jobgate.v1 import worker_service_pb2 as pb
from jobgate.v1 import worker_service_pb2_grpc
from serving import placement
from serving.auth import WORKER_SERVICE_ROLES, Caller
from serving.convert import job_to_proto, timestamp
from serving.logs import job_fields
from serving.shared import Serving
from store.errors import JobCancelled, JobNotFound, LeaseLost, StoreError
from store.model import (
    ClaimedJob,
    Job,
    JobStatus,
    ReportAnswer,
    ReportedAndClaimed,
    ResultRecorded,
)
from worker_server import convert, validate
from worker_server.registry import WorkerRegistry

log = logging.getLogger("jobgate.worker_server")
Context = grpc.aio.ServicerContext[Any, Any]

# Answer (empty) this long before the caller's deadline rather than let it expire.
_DEADLINE_MARGIN = timedelta(milliseconds=500)


class WorkerService(worker_service_pb2_grpc.WorkerServiceServicer):
    def __init__(self, serving: Serving, registry: WorkerRegistry | None = None) -> None:
        self._serving = serving
        self._store = serving.store
        self._releasing: set[asyncio.Task[None]] = set()
        # who calls, for ListWorkers: noted per call, written in batches
        self.registry = registry if registry is not None else WorkerRegistry(serving.store)

    def _authorize(self, context: Context) -> Caller:
        # Workers serve every tenant (a shared fleet); the lease id proves ownership.
        return self._serving.auth.authenticate(context.invocation_metadata(), WORKER_SERVICE_ROLES)

    async def ClaimNext(
        self, request: pb.ClaimNextRequest, context: Context
    ) -> pb.ClaimNextResponse:
        caller = self._authorize(context)
        validate.claim_next(request)
        pool = placement.claim_pool(caller, request.pool)
        self.registry.saw(request.worker_id, pool, request.models)
        wait = _wait(request, context)
        claimed = await self._claim(
            request.worker_id, request.models, pool, request.max_jobs or 1, wait, context
        )
        if wait:  # a long poll: the worker was there all along
            self.registry.saw(request.worker_id, pool, request.models)
        return pb.ClaimNextResponse(jobs=[convert.claimed_job(item) for item in claimed])

    def _release_later(self, claimed: Sequence[ClaimedJob]) -> None:
        """Give the leases back at once (not after lease_timeout), even if this call dies."""
        if not claimed:
            return
        task = asyncio.create_task(self._release(claimed))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _release(self, claimed: Sequence[ClaimedJob]) -> None:
        try:
            released = await self._store.release(claimed)
        except StoreError as error:
            log.warning("could not release a claim whose caller was gone: %s", error)
            return
        for item in claimed[:released]:
            log.info("job claim released", extra=job_fields(item.job))

    async def Heartbeat(
        self, request: pb.HeartbeatRequest, context: Context
    ) -> pb.HeartbeatResponse:
        self._authorize(context)
        validate.heartbeat(request)
        result = await self._store.heartbeat(
            request.job_id, request.lease_id, request.progress, request.stage
        )
        self.registry.touched(result.worker_id)  # the request names no worker: the lease does
        return convert.heartbeat_response(result)

    async def SetResult(
        self, request: pb.SetResultRequest, context: Context
    ) -> pb.SetResultResponse:
        self._authorize(context)
        validate.set_result(request, self._serving.settings.max_payload_bytes)
        job = await self._record(request)
        self.registry.touched(job.worker_id)
        return pb.SetResultResponse(job=job_to_proto(job))

    async def ReportAndClaim(
        self, request: pb.ReportAndClaimRequest, context: Context
    ) -> pb.ReportAndClaimResponse:
        caller = self._authorize(context)
        validate.report_and_claim(request, self._serving.settings.max_payload_bytes)
        pool = placement.claim_pool(caller, request.pool)
        if request.models:
            self.registry.saw(request.worker_id, pool, request.models)
        else:  # a report alone says nothing of what the worker serves
            self.registry.touched(request.worker_id)
        response = pb.ReportAndClaimResponse()
        # Each beat is its own store step; sent together, a worker's batch of
        # beats costs one round trip of wall time, not one per held job.
        if request.heartbeats:  # most calls carry none: no gather on the hot path
            response.heartbeats.extend(
                await asyncio.gather(*(self._beat(beat) for beat in request.heartbeats))
            )
        results = [(r.job_id, r.lease_id, convert.result_report(r)) for r in request.results]
        # The results and the claim of what is queued now share one store step.
        # Only a claim makes it commit at once; the results need their commit
        # before this answer, not one of their own (settled(soon) below).
        reported = await self._store.report_and_claim(
            request.worker_id, request.models, results, request.max_jobs, pool, settle=False
        )
        recorded: list[tuple[ResultRecorded, bool]] = []
        for result, answer in zip(request.results, reported.results, strict=True):
            response.results.add(job_id=answer.job_id, outcome=_outcome(answer))
            if answer.recorded is not None:
                recorded.append((answer.recorded, result.retryable))
        # Results are counted once their commit is in (below), not before it: a
        # result whose commit failed is sent again, and applied again once the
        # store has reloaded its file. A call cut short leaves them applied.
        try:
            claimed = await self._claim_after_report(request, reported, pool, context)
        except asyncio.CancelledError:
            self._count(recorded)
            raise
        self._count(recorded)
        response.jobs.extend(convert.claimed_job(item) for item in claimed)
        return response

    async def _claim_after_report(
        self,
        request: pb.ReportAndClaimRequest,
        reported: ReportedAndClaimed,
        pool: str,
        context: Context,
    ) -> list[ClaimedJob]:
        """What is queued now, else a long poll; returns once the results are committed."""
        unsettled = bool(request.results) and not reported.claimed
        claimed = self._hand_out(request.worker_id, reported.claimed, context)
        wait = _wait(request, context)
        waits = request.max_jobs > 0 and not request.heartbeats and wait
        if waits and not claimed and not _caller_gone(context):
            # Nothing queued: long-poll as ClaimNext does (a heartbeat's answer,
            # cancel_requested, never waits for a job; nor does a caller gone).
            claimed = await self._claim(
                request.worker_id, request.models, pool, request.max_jobs, wait, context
            )
            unsettled = unsettled and not claimed  # a claim's answer waited for its commit
        if unsettled:
            # Only this worker waits for these answers (a reader's answer waits for
            # the commit itself): on a durable embedded store they ride the next
            # commit, most often the Submit's that the next claim waits for.
            await self._store.settled(soon=True)
        return claimed

    def _count(self, recorded: Sequence[tuple[ResultRecorded, bool]]) -> None:
        for item, retryable in recorded:
            self._recorded(item, retryable)

    async def _claim(
        self,
        worker_id: str,
        models: Sequence[str],
        pool: str,
        max_jobs: int,
        wait: timedelta,
        context: Context,
    ) -> list[ClaimedJob]:
        claim = asyncio.ensure_future(
            self._store.claim(worker_id, list(dict.fromkeys(models)), max_jobs, wait, pool)
        )
        try:
            finished, claimed = await self._serving.lifecycle.unless_draining(claim)
        except asyncio.CancelledError:
            # cancelled as the store answered: nobody will receive these leases
            self._release_later(_claimed_by(claim))
            raise
        if not finished or not claimed:
            return []  # nothing came, or the server is draining
        return self._hand_out(worker_id, claimed, context)

    def _hand_out(
        self, worker_id: str, claimed: list[ClaimedJob], context: Context
    ) -> list[ClaimedJob]:
        """The claimed jobs to answer with; given back at once if the caller is gone."""
        if claimed and _caller_gone(context):
            self._release_later(claimed)
            return []
        self._serving.metrics.claimed(claimed)
        for item in claimed:
            log.debug("job claimed", extra=job_fields(item.job, worker_id=worker_id))
        return claimed

    async def _beat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatAnswer:
        answer = pb.HeartbeatAnswer(job_id=request.job_id)
        try:
            result = await self._store.heartbeat(
                request.job_id, request.lease_id, request.progress, request.stage
            )
        except Refused as refused:
            answer.outcome = _refusal(refused)
            answer.cancel_requested = isinstance(refused, JobCancelled)
            return answer
        answer.outcome = pb.REPORT_OUTCOME_APPLIED
        answer.lease_expire_time.CopyFrom(timestamp(result.lease_expire_time))
        answer.cancel_requested = result.cancel_requested
        return answer

    async def _record(self, request: pb.SetResultRequest) -> Job:
        recorded = await self._store.record_result(
            request.job_id, request.lease_id, convert.result_report(request)
        )
        return self._recorded(recorded, request.retryable)

    def _recorded(self, recorded: ResultRecorded, retryable: bool) -> Job:
        job = recorded.job
        # A repeat after a lost answer changed nothing, so it is not counted again.
        if recorded.applied and job.terminal:
            self._serving.metrics.finished(job)
        # A failure is what an operator looks for; a completion is the hot path.
        level = logging.DEBUG if job.status is JobStatus.COMPLETED else logging.INFO
        log.log(level, "job result", extra=job_fields(job, retryable=retryable))
        return job


# A refused report is answered in its own outcome in ReportAndClaim, not as an
# RPC error; store trouble still fails the whole call.
Refused = (LeaseLost, JobCancelled, JobNotFound)


def _outcome(answer: ReportAnswer) -> pb.ReportOutcome.ValueType:
    if answer.recorded is None:
        assert isinstance(answer.refused, Refused)
        return _refusal(answer.refused)
    return pb.REPORT_OUTCOME_APPLIED


def _refusal(refused: LeaseLost | JobCancelled | JobNotFound) -> pb.ReportOutcome.ValueType:
    if isinstance(refused, LeaseLost):
        return pb.REPORT_OUTCOME_LEASE_LOST
    if isinstance(refused, JobCancelled):
        return pb.REPORT_OUTCOME_JOB_CANCELLED
    return pb.REPORT_OUTCOME_JOB_NOT_FOUND


def _claimed_by(claim: asyncio.Future[list[ClaimedJob]]) -> list[ClaimedJob]:
    """What a settled claim leased; nothing if it failed or was cancelled."""
    if not claim.done() or claim.cancelled() or claim.exception() is not None:
        return []
    return claim.result()


def _caller_gone(context: Context) -> bool:
    """The client cancelled, or its deadline passed: an answer would be dropped.

    grpc cancels the call's task first; context.cancelled() turns True only
    later, so a cancel that a store answer already on its way absorbed shows
    only as the task's pending cancellation.
    """
    task = asyncio.current_task()
    remaining = context.time_remaining()
    return (
        context.cancelled()
        or (task is not None and task.cancelling() > 0)
        or (remaining is not None and remaining <= 0)
    )


def _wait(request: pb.ClaimNextRequest | pb.ReportAndClaimRequest, context: Context) -> timedelta:
    wait = request.wait.ToTimedelta()
    remaining = context.time_remaining()
    if remaining is not None and wait > timedelta(0):
        wait = max(timedelta(0), min(wait, timedelta(seconds=remaining) - _DEADLINE_MARGIN))
    return wait
