"""A scripted in-process JobService: answers each call with the next scripted step.

It records every request with its arrival time, metadata and deadline so
tests can assert what the client actually sent and when.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
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

    def script(self, method: str, *steps: Any) -> None:
        self.scripts.setdefault(method, deque()).extend(steps)

    def calls(self, method: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.method == method]

    async def _step(self, method: str, request: Any, context: Any, default: Any) -> Any:
        remaining = context.time_remaining()
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
        self.seen.append(Seen(method, request, time.monotonic(), metadata, remaining))
        steps = self.scripts.get(method)
        step = steps.popleft() if steps else default
        if isinstance(step, Fail):
            status = step.status()
            await context.abort(status.code, status.details, status.trailing_metadata)
        if isinstance(step, Hang):
            await asyncio.sleep(3600)
        return step

    async def Submit(self, request: Any, context: Any) -> Any:
        default = job_service_pb2.SubmitResponse(job=job(model=request.job.model))
        return await self._step("Submit", request, context, default)

    async def Get(self, request: Any, context: Any) -> Any:
        default = job_service_pb2.GetResponse(job=job(request.job_id))
        return await self._step("Get", request, context, default)

    async def Cancel(self, request: Any, context: Any) -> Any:
        cancelled = job(request.job_id, job_pb2.JOB_STATUS_CANCELLED)
        default = job_service_pb2.CancelResponse(job=cancelled, cancelled=True)
        return await self._step("Cancel", request, context, default)

    async def StreamStatus(self, request: Any, context: Any) -> AsyncIterator[Any]:
        await self._step("StreamStatus", request, context, None)
        for item in self.streams.popleft() if self.streams else []:
            if isinstance(item, Fail):
                status = item.status()
                await context.abort(status.code, status.details, status.trailing_metadata)
            yield job_service_pb2.StreamStatusResponse(job=item)


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
