"""A thin typed layer over the generated stubs, for black-box tests.

Deliberately not `jobgate.JobClient`: these tests hold the wire contract
(proto names, metadata, status details) to DESIGN.md, so they speak the
stubs directly over grpc.aio channels.
"""

from __future__ import annotations

import contextlib
import copy
import re
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

Metadata = tuple[tuple[str, str], ...]
CALL_TIMEOUT = 10.0
ERROR_DOMAIN = "jobgate.dev"

QUEUED = job_pb2.JOB_STATUS_QUEUED
HELD = job_pb2.JOB_STATUS_HELD
PROCESSING = job_pb2.JOB_STATUS_PROCESSING
COMPLETED = job_pb2.JOB_STATUS_COMPLETED
FAILED = job_pb2.JOB_STATUS_FAILED
CANCELLED = job_pb2.JOB_STATUS_CANCELLED
PARTIAL = job_pb2.JOB_STATUS_PARTIAL
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, PARTIAL})

INTERACTIVE = job_pb2.PRIORITY_INTERACTIVE
SYSTEM = job_pb2.PRIORITY_SYSTEM
BATCH = job_pb2.PRIORITY_BATCH


def fresh_name(prefix: str) -> str:
    """A model or tenant name no other test uses (so tests share servers safely)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def duration(seconds: float) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromNanoseconds(round(seconds * 1e9))
    return value


def spec(model: str, payload: bytes = b"", **fields: Any) -> job_pb2.JobSpec:
    """A JobSpec; `queue_timeout`/`run_timeout` may be given as float seconds."""
    for name in ("queue_timeout", "run_timeout"):
        if isinstance(fields.get(name), int | float):
            fields[name] = duration(fields[name])
    return job_pb2.JobSpec(model=model, payload=payload, **fields)


def tenant_metadata(tenant: str) -> Metadata:
    """Open mode: the tenant travels in x-jobgate-tenant."""
    return (("x-jobgate-tenant", tenant),)


@dataclass
class Failure:
    """A failed call as the contract describes it: code plus google.rpc details."""

    code: grpc.StatusCode
    message: str
    reason: str | None = None
    domain: str | None = None
    retry_delay: float | None = None
    violations: list[tuple[str, str]] = field(default_factory=list)

    def names_field(self, name: str) -> bool:
        """True when a BadRequest violation's path mentions `name` as one component."""
        return any(
            name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path) for path, _ in self.violations
        )

    def __str__(self) -> str:
        return (
            f"{self.code.name} reason={self.reason} domain={self.domain} "
            f"retry={self.retry_delay} violations={self.violations} message={self.message!r}"
        )


def parse_failure(error: grpc.aio.AioRpcError) -> Failure:
    failure = Failure(error.code(), error.details() or "")
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        return failure
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            failure.reason, failure.domain = info.reason, info.domain
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            failure.retry_delay = retry.retry_delay.ToNanoseconds() / 1e9
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            failure.violations = [(v.field, v.description) for v in bad.field_violations]
    return failure


async def failure_of(call: Awaitable[Any]) -> Failure:
    """Await a call that must fail; return its parsed status."""
    try:
        result = await call
    except grpc.aio.AioRpcError as error:
        return parse_failure(error)
    raise AssertionError(f"expected the call to fail, it returned {result!r}")


class Api:
    """Both services as one tenant (client side) and one worker sees them."""

    def __init__(
        self,
        job_channel: grpc.aio.Channel,
        worker_channel: grpc.aio.Channel,
        client_metadata: Metadata = (),
        worker_metadata: Metadata = (),
        worker_id: str = "",
    ) -> None:
        self.jobs = job_service_pb2_grpc.JobServiceStub(job_channel)
        self.workers = worker_service_pb2_grpc.WorkerServiceStub(worker_channel)
        self.client_metadata = client_metadata
        self.worker_metadata = worker_metadata
        self.worker_id = worker_id or fresh_name("worker")
        self.submitted: list[str] = []

    def with_worker_id(self, worker_id: str) -> Api:
        """Another worker on the same channels and credentials."""
        twin = copy.copy(self)
        twin.worker_id = worker_id
        twin.submitted = []
        return twin

    # JobService

    async def submit_request(
        self, request: job_service_pb2.SubmitRequest
    ) -> job_service_pb2.SubmitResponse:
        response: job_service_pb2.SubmitResponse = await self.jobs.Submit(
            request, metadata=self.client_metadata, timeout=CALL_TIMEOUT
        )
        self.submitted.append(response.job.id)
        return response

    async def batch_submit(
        self, *requests: job_service_pb2.SubmitRequest
    ) -> list[job_service_pb2.SubmitResponse]:
        batch = job_service_pb2.BatchSubmitRequest(requests=requests)
        response: job_service_pb2.BatchSubmitResponse = await self.jobs.BatchSubmit(
            batch, metadata=self.client_metadata, timeout=CALL_TIMEOUT
        )
        self.submitted.extend(item.job.id for item in response.responses)
        return list(response.responses)

    async def submit(
        self,
        model: str,
        payload: bytes = b"",
        *,
        priority: job_pb2.Priority.ValueType = BATCH,
        key: str = "",
        **fields: Any,
    ) -> job_pb2.Job:
        request = job_service_pb2.SubmitRequest(
            idempotency_key=key, priority=priority, job=spec(model, payload, **fields)
        )
        return (await self.submit_request(request)).job

    async def submit_group(
        self,
        children: Sequence[job_pb2.JobSpec],
        max_parallel: int = 0,
        *,
        priority: job_pb2.Priority.ValueType = BATCH,
        key: str = "",
    ) -> job_pb2.Job:
        group = job_pb2.GroupSpec(children=children, max_parallel=max_parallel)
        request = job_service_pb2.SubmitRequest(idempotency_key=key, priority=priority, group=group)
        return (await self.submit_request(request)).job

    async def get(self, job_id: str) -> job_pb2.Job:
        response: job_service_pb2.GetResponse = await self.jobs.Get(
            job_service_pb2.GetRequest(job_id=job_id),
            metadata=self.client_metadata,
            timeout=CALL_TIMEOUT,
        )
        return response.job

    async def cancel(self, job_id: str, reason: str = "") -> job_service_pb2.CancelResponse:
        response: job_service_pb2.CancelResponse = await self.jobs.Cancel(
            job_service_pb2.CancelRequest(job_id=job_id, reason=reason),
            metadata=self.client_metadata,
            timeout=CALL_TIMEOUT,
        )
        return response

    async def list_jobs(
        self, filter: str = "", page_size: int = 0, page_token: str = ""
    ) -> job_service_pb2.ListJobsResponse:
        request = job_service_pb2.ListJobsRequest(
            filter=filter, page_size=page_size, page_token=page_token
        )
        response: job_service_pb2.ListJobsResponse = await self.jobs.ListJobs(
            request, metadata=self.client_metadata, timeout=CALL_TIMEOUT
        )
        return response

    async def list_all(self, filter: str = "", page_size: int = 0) -> list[job_pb2.Job]:
        """Every job of a whole ListJobs walk."""
        jobs: list[job_pb2.Job] = []
        token = ""
        while True:
            page = await self.list_jobs(filter, page_size, token)
            jobs.extend(page.jobs)
            if not page.next_page_token:
                return jobs
            token = page.next_page_token

    async def retry(self, job_id: str) -> job_pb2.Job:
        response: job_service_pb2.RetryJobResponse = await self.jobs.RetryJob(
            job_service_pb2.RetryJobRequest(job_id=job_id),
            metadata=self.client_metadata,
            timeout=CALL_TIMEOUT,
        )
        return response.job

    def stream(self, job_id: str, timeout: float = 30.0) -> Any:
        """The StreamStatus call (an async iterator of StreamStatusResponse)."""
        return self.jobs.StreamStatus(
            job_service_pb2.StreamStatusRequest(job_id=job_id),
            metadata=self.client_metadata,
            timeout=timeout,
        )

    # WorkerService

    async def claim(
        self, models: Sequence[str], *, wait: float = 0.0, max_jobs: int = 1, pool: str = ""
    ) -> list[worker_service_pb2.ClaimedJob]:
        request = worker_service_pb2.ClaimNextRequest(
            worker_id=self.worker_id,
            models=models,
            wait=duration(wait),
            max_jobs=max_jobs,
            pool=pool,
        )
        response: worker_service_pb2.ClaimNextResponse = await self.workers.ClaimNext(
            request, metadata=self.worker_metadata, timeout=wait + CALL_TIMEOUT
        )
        return list(response.jobs)

    async def claim_one(self, model: str, wait: float = 5.0) -> worker_service_pb2.ClaimedJob:
        claimed = await self.claim([model], wait=wait)
        assert len(claimed) == 1, f"expected one job of {model}, got {len(claimed)}"
        return claimed[0]

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float = 0.0, stage: str = ""
    ) -> worker_service_pb2.HeartbeatResponse:
        request = worker_service_pb2.HeartbeatRequest(
            job_id=job_id, lease_id=lease_id, progress=progress, stage=stage
        )
        response: worker_service_pb2.HeartbeatResponse = await self.workers.Heartbeat(
            request, metadata=self.worker_metadata, timeout=CALL_TIMEOUT
        )
        return response

    async def set_result(self, request: worker_service_pb2.SetResultRequest) -> job_pb2.Job:
        response: worker_service_pb2.SetResultResponse = await self.workers.SetResult(
            request, metadata=self.worker_metadata, timeout=CALL_TIMEOUT
        )
        return response.job

    async def complete(
        self, job_id: str, lease_id: str, result: bytes = b"done", content_type: str = ""
    ) -> job_pb2.Job:
        return await self.set_result(
            worker_service_pb2.SetResultRequest(
                job_id=job_id,
                lease_id=lease_id,
                status=COMPLETED,
                result=result,
                result_content_type=content_type,
            )
        )

    async def fail(
        self,
        job_id: str,
        lease_id: str,
        *,
        code: str = "BOOM",
        message: str = "it broke",
        retryable: bool = False,
    ) -> job_pb2.Job:
        return await self.set_result(
            worker_service_pb2.SetResultRequest(
                job_id=job_id,
                lease_id=lease_id,
                status=FAILED,
                error_code=code,
                error_message=message,
                retryable=retryable,
            )
        )

    async def run_to_completion(self, model: str, result: bytes = b"done") -> job_pb2.Job:
        """Claim the next job of `model` and complete it."""
        claimed = await self.claim_one(model)
        return await self.complete(claimed.job.id, claimed.lease_id, result)

    async def cancel_all(self) -> None:
        """Release every live job this Api submitted (keeps shared caps free)."""
        for job_id in self.submitted:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self.cancel(job_id)
