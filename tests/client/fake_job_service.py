"""A scripted in-process JobService: answers each call with the next scripted step.

It records every request with its arrival time, metadata and deadline so
tests can assert what the client actually sent and when. When a method's
script runs out it behaves like a small server over in-memory state:
ListJobs pages through `jobs` (in list order, which tests give newest first)
with a tiny filter of `field = value` terms joined by AND and tokens bound
to their filter; RetryJob puts a FAILED, CANCELLED or PARTIAL job of `jobs`
back to QUEUED and refuses others as the real servers do; ListWorkers and
ListQueues answer `workers` and `queues`.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from jobgate.v1.errors import ERROR_DOMAIN


@dataclass(frozen=True)
class Fail:
    """Answer with this status code, reason and optional RetryInfo / field violations."""

    code: int
    reason: str = ""
    retry_delay: float | None = None
    violations: Sequence[tuple[str, str]] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    domain: str = ERROR_DOMAIN

    def status(self) -> grpc.Status:
        status = status_pb2.Status(code=self.code, message=f"scripted {self.reason or self.code}")
        if self.reason:
            info = error_details_pb2.ErrorInfo(
                reason=self.reason, domain=self.domain, metadata=self.metadata
            )
            status.details.add().Pack(info)
        if self.retry_delay is not None:
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(int(self.retry_delay * 1e9))
            status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        if self.violations:
            bad = error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=f, description=d)
                    for f, d in self.violations
                ]
            )
            status.details.add().Pack(bad)
        return rpc_status.to_status(status)


UNAVAILABLE = Fail(code_pb2.UNAVAILABLE, "STORE_UNAVAILABLE")


@dataclass(frozen=True)
class Hang:
    """Never answer (until the client's deadline)."""


@dataclass
class Seen:
    method: str
    request: Any
    at: float
    metadata: dict[str, str]
    time_remaining: float | None


def job(
    job_id: str = "01JOB", status: int = job_pb2.JOB_STATUS_QUEUED, **fields: Any
) -> job_pb2.Job:
    return job_pb2.Job(id=job_id, status=status, **fields)  # type: ignore[arg-type]


class FakeJobService(job_service_pb2_grpc.JobServiceServicer):
    """Scripted steps per method; when a script runs out, answers with a default success."""

    def __init__(self) -> None:
        self.scripts: dict[str, deque[Any]] = {}
        self.seen: list[Seen] = []
        #: StreamStatus: one list of snapshots (or a trailing Fail) per stream opened.
        self.streams: deque[list[Any]] = deque()
        #: What ListJobs lists (in this order) and RetryJob finds and changes.
        self.jobs: list[job_pb2.Job] = []
        self.workers: list[job_pb2.Worker] = []
        self.queues: list[job_pb2.QueueStats] = []

    def script(self, method: str, *steps: Any) -> None:
        self.scripts.setdefault(method, deque()).extend(steps)

    def calls(self, method: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.method == method]

    async def _step(self, method: str, request: Any, context: Any, default: Any) -> Any:
        """The next scripted step, else `default` (called first when it is a function,
        so that in-memory behaviour runs only when no script answers)."""
        remaining = context.time_remaining()
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
        self.seen.append(Seen(method, request, time.monotonic(), metadata, remaining))
        steps = self.scripts.get(method)
        step = steps.popleft() if steps else default() if callable(default) else default
        if isinstance(step, Fail):
            status = step.status()
            await context.abort(status.code, status.details, status.trailing_metadata)
        if isinstance(step, Hang):
            await asyncio.sleep(3600)
        return step

    async def Submit(self, request: Any, context: Any) -> Any:
        default = job_service_pb2.SubmitResponse(job=job(model=request.job.model))
        return await self._step("Submit", request, context, default)

    async def BatchSubmit(self, request: Any, context: Any) -> Any:
        default = job_service_pb2.BatchSubmitResponse(
            responses=[
                job_service_pb2.SubmitResponse(job=job(f"01JOB{i}", model=item.job.model))
                for i, item in enumerate(request.requests)
            ]
        )
        return await self._step("BatchSubmit", request, context, default)

    async def Get(self, request: Any, context: Any) -> Any:
        default = job_service_pb2.GetResponse(job=job(request.job_id))
        return await self._step("Get", request, context, default)

    async def Cancel(self, request: Any, context: Any) -> Any:
        cancelled = job(request.job_id, job_pb2.JOB_STATUS_CANCELLED)
        default = job_service_pb2.CancelResponse(job=cancelled, cancelled=True)
        return await self._step("Cancel", request, context, default)

    async def ListJobs(self, request: Any, context: Any) -> Any:
        return await self._step("ListJobs", request, context, lambda: self._list_jobs(request))

    async def RetryJob(self, request: Any, context: Any) -> Any:
        return await self._step("RetryJob", request, context, lambda: self._retry(request.job_id))

    async def ListWorkers(self, request: Any, context: Any) -> Any:
        default = job_service_pb2.ListWorkersResponse(workers=self.workers)
        return await self._step("ListWorkers", request, context, default)

    async def ListQueues(self, request: Any, context: Any) -> Any:
        default = job_service_pb2.ListQueuesResponse(queues=self.queues)
        return await self._step("ListQueues", request, context, default)

    def _list_jobs(self, request: job_service_pb2.ListJobsRequest) -> Any:
        if request.page_size < 0:
            return Fail(code_pb2.INVALID_ARGUMENT, violations=[("page_size", "negative")])
        size = min(request.page_size or 50, 1000)
        try:
            matches = parse_filter(request.filter)
            start = read_token(request.page_token, request.filter)
        except ValueError as error:
            field, _, why = str(error).partition(": ")
            return Fail(code_pb2.INVALID_ARGUMENT, violations=[(field, why)])
        found = [job for job in self.jobs if matches(job)]
        page = found[start : start + size]
        more = start + size < len(found)
        token = make_token(request.filter, start + size) if more else ""
        return job_service_pb2.ListJobsResponse(jobs=page, next_page_token=token)

    def _retry(self, job_id: str) -> Any:
        found = [job for job in self.jobs if job.id == job_id]
        if not found:
            return Fail(code_pb2.NOT_FOUND, "JOB_NOT_FOUND", metadata={"job_id": job_id})
        job = found[0]
        if job.status not in RETRYABLE or job.kind == job_pb2.JOB_KIND_CHILD:
            status = job_pb2.JobStatus.Name(job.status)
            metadata = {"job_id": job_id, "status": status}
            return Fail(code_pb2.FAILED_PRECONDITION, "JOB_NOT_RETRYABLE", metadata=metadata)
        job.status = job_pb2.JOB_STATUS_QUEUED
        job.attempts = 0
        job.ClearField("error_code")
        job.ClearField("error_message")
        job.ClearField("end_time")
        return job_service_pb2.RetryJobResponse(job=job)

    async def StreamStatus(self, request: Any, context: Any) -> AsyncIterator[Any]:
        await self._step("StreamStatus", request, context, None)
        for item in self.streams.popleft() if self.streams else []:
            if isinstance(item, Fail):
                status = item.status()
                await context.abort(status.code, status.details, status.trailing_metadata)
            yield job_service_pb2.StreamStatusResponse(job=item)


RETRYABLE = (job_pb2.JOB_STATUS_FAILED, job_pb2.JOB_STATUS_CANCELLED, job_pb2.JOB_STATUS_PARTIAL)

_TERM = re.compile(r'\s*([a-z_.]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s"]+)\s*$')
_ENUMS = {"status": ("JOB_STATUS_", job_pb2.JobStatus), "kind": ("JOB_KIND_", job_pb2.JobKind)}


def parse_filter(text: str) -> Callable[[job_pb2.Job], bool]:
    """`field = value` terms joined by AND (a subset of the real grammar)."""
    terms: list[tuple[str, str]] = []
    for part in text.split(" AND ") if text.strip() else []:
        match = _TERM.match(part)
        if match is None:
            raise ValueError(f"filter: cannot read {part.strip()!r}")
        field, value = match.groups()
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        terms.append((field, value))

    def value_of(job: job_pb2.Job, field: str) -> str:
        if field in _ENUMS:
            prefix, enum = _ENUMS[field]
            return str(enum.Name(getattr(job, field))).removeprefix(prefix)
        if field.startswith("labels."):
            return job.labels.get(field.removeprefix("labels."), "")
        if field in ("model", "pool", "error_code", "parent_id", "tenant"):
            return str(getattr(job, field))
        raise ValueError(f"filter: unknown field {field!r}")

    for field, _ in terms:
        value_of(job_pb2.Job(), field)  # refuse an unknown field up front
    return lambda job: all(value_of(job, field) == value for field, value in terms)


def make_token(filter_text: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{offset}:{filter_text}".encode()).decode()


def read_token(token: str, filter_text: str) -> int:
    if not token:
        return 0
    try:
        offset, _, bound = base64.urlsafe_b64decode(token).decode().partition(":")
        if bound != filter_text:
            raise ValueError
        return int(offset)
    except ValueError:
        raise ValueError("page_token: not a token of this filter") from None


async def start(
    service: FakeJobService, credentials: grpc.ServerCredentials | None = None
) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    job_service_pb2_grpc.add_JobServiceServicer_to_server(service, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    return server, f"127.0.0.1:{port}"
