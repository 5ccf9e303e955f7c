"""JobService: authenticate, validate, call the store, convert. No state rules here."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio

from gateway_server import convert, fleet, listing, validate
from jobgate.v1 import job_service_pb2 as pb
from jobgate.v1 import job_service_pb2_grpc
from serving import placement
from serving.auth import JOB_SERVICE_ROLES, Caller, require_operator
from serving.convert import job_to_proto
from serving.logs import job_fields
from serving.shared import Serving
from store.errors import StoreError
from store.model import Job, JobKind, JobStatus

log = logging.getLogger("jobgate.gateway")
Context = grpc.aio.ServicerContext[Any, Any]


class JobService(job_service_pb2_grpc.JobServiceServicer):
    def __init__(self, serving: Serving) -> None:
        self._serving = serving
        self._store = serving.store
        self._settings = serving.settings

    def _caller(self, context: Context) -> Caller:
        return self._serving.auth.authenticate(context.invocation_metadata(), JOB_SERVICE_ROLES)

    async def Submit(self, request: pb.SubmitRequest, context: Context) -> pb.SubmitResponse:
        caller = self._caller(context)
        validate.submit(request, self._settings)
        submit = placement.bind_submit(
            caller.pools, convert.submit_request(caller.tenant, request, caller.weight)
        )
        result = await self._store.submit(submit)
        if not result.reused:
            self._serving.metrics.submitted(
                caller.tenant, submit.priority, convert.specs_of(submit)
            )
        # Per job and on the hot path: DEBUG (--log-transitions logs every change).
        log.debug("job submitted", extra=job_fields(result.job, reused=result.reused))
        return pb.SubmitResponse(job=job_to_proto(result.job), reused=result.reused)

    async def BatchSubmit(
        self, request: pb.BatchSubmitRequest, context: Context
    ) -> pb.BatchSubmitResponse:
        caller = self._caller(context)
        validate.batch_submit(request, self._settings)
        submits = placement.bind_batch(
            caller.pools,
            [
                convert.submit_request(caller.tenant, item, caller.weight)
                for item in request.requests
            ],
        )
        results = await self._store.submit_batch(submits)
        response = pb.BatchSubmitResponse()
        for submit, result in zip(submits, results, strict=True):
            if not result.reused:
                self._serving.metrics.submitted(
                    caller.tenant, submit.priority, convert.specs_of(submit)
                )
            response.responses.add(job=job_to_proto(result.job), reused=result.reused)
        reused = sum(result.reused for result in results)
        log.info(
            "jobs submitted",
            extra={"tenant": caller.tenant, "count": len(results), "reused": reused},
        )
        return response

    async def Get(self, request: pb.GetRequest, context: Context) -> pb.GetResponse:
        caller = self._caller(context)
        validate.job_id(request.job_id)
        job = await self._store.get(caller.tenant_scope, request.job_id)
        return pb.GetResponse(job=job_to_proto(job))

    async def StreamStatus(
        self, request: pb.StreamStatusRequest, context: Context
    ) -> AsyncIterator[pb.StreamStatusResponse]:
        caller = self._caller(context)
        validate.job_id(request.job_id)
        lifecycle = self._serving.lifecycle
        snapshots = self._store.watch(caller.tenant_scope, request.job_id)
        # aclosing: the store's watcher is released however the stream ends
        # (terminal snapshot, client gone, drain).
        async with contextlib.aclosing(snapshots):  # type: ignore[type-var]
            while True:
                finished, job = await lifecycle.unless_draining(_next(snapshots))
                if not finished or job is None:
                    return  # drained, or the terminal snapshot was sent
                yield pb.StreamStatusResponse(job=job_to_proto(job))

    async def Cancel(self, request: pb.CancelRequest, context: Context) -> pb.CancelResponse:
        caller = self._caller(context)
        validate.cancel(request)
        scope = caller.tenant_scope
        result = await self._store.cancel(scope, request.job_id, request.reason, caller.actor)
        if result.cancelled:
            log.info("job cancelled", extra=job_fields(result.job, actor=caller.actor))
            await self._count_cancelled(scope, result.job)
        return pb.CancelResponse(job=job_to_proto(result.job), cancelled=result.cancelled)

    async def _count_cancelled(self, tenant: str | None, job: Job) -> None:
        metrics = self._serving.metrics
        if job.kind is not JobKind.GROUP:
            metrics.finished(job)
            return
        # The group's held and queued children were cancelled in the same
        # atomic step, so they carry the parent's end_time; the summaries
        # have no model, hence one read per group cancel.
        try:
            children = await self._store.list_children(tenant, job.id)
        except StoreError as error:
            log.warning("cancelled children not counted: %s", error, extra=job_fields(job))
            return
        for child in children:
            if child.status is JobStatus.CANCELLED and child.end_time == job.end_time:
                metrics.finished(child)

    async def ListJobs(self, request: pb.ListJobsRequest, context: Context) -> pb.ListJobsResponse:
        query = listing.list_query(self._caller(context), request)
        page = await self._store.list_jobs(query.tenant, query.filter, query.after, query.page_size)
        return listing.list_response(query, page)

    async def RetryJob(self, request: pb.RetryJobRequest, context: Context) -> pb.RetryJobResponse:
        caller = self._caller(context)
        validate.retry_job(request)
        scope = caller.tenant_scope
        job = await self._store.get(scope, request.job_id)
        redo = await self._to_redo(scope, job)
        # the job's tenant's pools now, which may be narrower than at submit
        pools = self._serving.auth.policy(job.tenant).pools
        for unit in redo:
            placement.check_retry(pools, unit.id, unit.pool)
        retried = await self._store.retry_job(scope, job.id, caller.actor)
        self._serving.metrics.retried(redo)
        log.info("job retried", extra=job_fields(retried, actor=caller.actor))
        return pb.RetryJobResponse(job=job_to_proto(retried))

    async def _to_redo(self, scope: str | None, job: Job) -> list[Job]:
        """The units of work a retry of `job` puts back: itself, or a group's
        children that ended without completing (the store refuses the rest)."""
        if job.kind is not JobKind.GROUP:
            return [job]
        children = await self._store.list_children(scope, job.id)
        return [c for c in children if c.status in (JobStatus.FAILED, JobStatus.CANCELLED)]

    async def ListWorkers(
        self, request: pb.ListWorkersRequest, context: Context
    ) -> pb.ListWorkersResponse:
        require_operator(self._caller(context), "ListWorkers")
        return fleet.list_workers_response(await self._store.list_workers())

    async def ListQueues(
        self, request: pb.ListQueuesRequest, context: Context
    ) -> pb.ListQueuesResponse:
        require_operator(self._caller(context), "ListQueues")
        return fleet.list_queues_response(await self._store.queue_stats())


async def _next(snapshots: AsyncIterator[Job]) -> Job | None:
    try:
        return await anext(snapshots)
    except StopAsyncIteration:
        return None
