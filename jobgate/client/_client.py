"""JobClient: the Python client for JobService (async), and SyncJobClient.

    async with JobClient("127.0.0.1:50051") as client:
        job = await client.submit("text-stats", b"hello world", content_type="text/plain")
        done = await client.wait_for_result(job.id, timeout=60)
        print(done.status, done.result)

Every unary call is retried on UNAVAILABLE, CANCELLED (from a server shutting
down) and RESOURCE_EXHAUSTED with a
jittered exponential back-off that honours the server's RetryInfo, all within
the call's deadline. Submit is safe to retry because the client generates an
idempotency key (a ULID) when the caller gives none, so a retry after a lost
answer returns the job the first attempt created. Errors are raised as the
typed exceptions of `jobgate.errors`.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

import grpc
from ulid import ULID

from jobgate.client._channel import ConnectionConfig
from jobgate.client._retry import RetryPolicy, call_with_retry
from jobgate.errors import DeadlineExceededError, error_from_rpc
from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc

T = TypeVar("T")
Req = TypeVar("Req")

Job = job_pb2.Job

TERMINAL_STATUSES = frozenset(
    {
        job_pb2.JOB_STATUS_COMPLETED,
        job_pb2.JOB_STATUS_FAILED,
        job_pb2.JOB_STATUS_CANCELLED,
        job_pb2.JOB_STATUS_PARTIAL,
    }
)

PRIORITIES: dict[str, job_pb2.Priority.ValueType] = {
    "interactive": job_pb2.PRIORITY_INTERACTIVE,
    "system": job_pb2.PRIORITY_SYSTEM,
    "batch": job_pb2.PRIORITY_BATCH,
}

PriorityLike = str | int
Seconds = float | timedelta

#: Default deadline of one unary call, retries included.
DEFAULT_TIMEOUT = 30.0


class _UseDefault(enum.Enum):
    TOKEN = 0


#: "Use the client's default timeout" (None itself means "no deadline").
USE_DEFAULT = _UseDefault.TOKEN
Timeout = float | None | _UseDefault


def is_terminal(job: job_pb2.Job) -> bool:
    """True once the job can change no more (COMPLETED, FAILED, CANCELLED, PARTIAL)."""
    return job.status in TERMINAL_STATUSES


def status_name(status: int) -> str:
    """'COMPLETED' for JOB_STATUS_COMPLETED, and so on."""
    return job_pb2.JobStatus.Name(status).removeprefix("JOB_STATUS_")  # type: ignore[arg-type]


def priority_value(priority: PriorityLike) -> job_pb2.Priority.ValueType:
    """A Priority enum value from 'interactive' | 'system' | 'batch' or an enum int."""
    if isinstance(priority, str):
        try:
            return PRIORITIES[priority.lower()]
        except KeyError:
            raise ValueError(
                f"unknown priority {priority!r}; expected one of {', '.join(PRIORITIES)}"
            ) from None
    return job_pb2.Priority.ValueType(priority)


def new_idempotency_key() -> str:
    """A fresh client-generated idempotency key (a ULID: unique and time-ordered)."""
    return str(ULID())


def job_spec(
    model: str,
    payload: bytes | str = b"",
    *,
    content_type: str = "",
    labels: Mapping[str, str] | None = None,
    max_attempts: int = 0,
    queue_timeout: Seconds | None = None,
    run_timeout: Seconds | None = None,
) -> job_pb2.JobSpec:
    """Build one JobSpec (a single job, or a child of a group). A str payload is UTF-8."""
    spec = job_pb2.JobSpec(
        model=model,
        payload=payload.encode() if isinstance(payload, str) else payload,
        content_type=content_type
        or ("text/plain; charset=utf-8" if isinstance(payload, str) else ""),
        labels=dict(labels or {}),
        max_attempts=max_attempts,
    )
    if queue_timeout is not None:
        spec.queue_timeout.FromTimedelta(_timedelta(queue_timeout))
    if run_timeout is not None:
        spec.run_timeout.FromTimedelta(_timedelta(run_timeout))
    return spec


def _timedelta(value: Seconds) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


class JobClient:
    """Async client for JobService. Use `async with`, or call `close()`."""

    def __init__(
        self,
        target: str | None = None,
        *,
        token: str | None = None,
        tenant: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        config: ConnectionConfig | None = None,
    ) -> None:
        """Connect lazily to `target` (else JOBGATE_TARGET, else 127.0.0.1:50051).

        `token` (else JOBGATE_TOKEN) is sent as a bearer token; `tenant` (else
        JOBGATE_TENANT) as x-jobgate-tenant for servers in open mode.
        `tls_ca`, `tls_cert`, `tls_key` are PEM file paths. `timeout` is the
        default deadline of one call, retries included (None: no deadline).
        """
        base = config or ConnectionConfig.from_env(target, token, tenant)
        self.config = base.with_tls_files(tls_ca, tls_cert, tls_key)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._channel: grpc.aio.Channel | None = None
        self._stub: job_service_pb2_grpc.JobServiceAsyncStub | None = None

    async def __aenter__(self) -> JobClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel; in-flight calls are cancelled."""
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None
            self._stub = None

    @property
    def stub(self) -> job_service_pb2_grpc.JobServiceAsyncStub:
        """The raw generated stub (the channel opens on first use)."""
        if self._stub is None:
            self._channel = self.config.open_channel()
            self._stub = job_service_pb2_grpc.JobServiceStub(self._channel)
        return self._stub

    def _deadline(self, timeout: Timeout) -> float | None:
        return self.timeout if isinstance(timeout, _UseDefault) else timeout

    async def submit(
        self,
        model: str,
        payload: bytes | str = b"",
        *,
        content_type: str = "",
        labels: Mapping[str, str] | None = None,
        priority: PriorityLike = "batch",
        max_attempts: int = 0,
        queue_timeout: Seconds | None = None,
        run_timeout: Seconds | None = None,
        idempotency_key: str | None = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> job_pb2.Job:
        """Submit one job and return it (QUEUED, or the existing job for a reused key)."""
        spec = job_spec(
            model,
            payload,
            content_type=content_type,
            labels=labels,
            max_attempts=max_attempts,
            queue_timeout=queue_timeout,
            run_timeout=run_timeout,
        )
        request = job_service_pb2.SubmitRequest(
            idempotency_key=idempotency_key or "", priority=priority_value(priority), job=spec
        )
        response = await self.submit_request(request, timeout=timeout)
        return response.job

    async def submit_group(
        self,
        children: Sequence[job_pb2.JobSpec],
        *,
        max_parallel: int = 0,
        priority: PriorityLike = "batch",
        idempotency_key: str | None = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> job_pb2.Job:
        """Submit a group (build children with `job_spec`); returns the parent job."""
        group = job_pb2.GroupSpec(children=list(children), max_parallel=max_parallel)
        request = job_service_pb2.SubmitRequest(
            idempotency_key=idempotency_key or "", priority=priority_value(priority), group=group
        )
        response = await self.submit_request(request, timeout=timeout)
        return response.job

    async def submit_request(
        self, request: job_service_pb2.SubmitRequest, *, timeout: Timeout = USE_DEFAULT
    ) -> job_service_pb2.SubmitResponse:
        """Submit a prepared request; returns the response (job and `reused`).

        A request without an idempotency key gets a fresh one here, so that
        every retry of this call carries the same key.
        """
        if not request.idempotency_key:
            keyed = job_service_pb2.SubmitRequest()
            keyed.CopyFrom(request)
            keyed.idempotency_key = new_idempotency_key()
            request = keyed
        return await self._unary("Submit", self.stub.Submit, request, timeout)

    async def batch_submit(
        self,
        requests: Sequence[job_service_pb2.SubmitRequest],
        *,
        timeout: Timeout = USE_DEFAULT,
    ) -> list[job_service_pb2.SubmitResponse]:
        """Submit many prepared requests in one call, all or nothing; responses in order.

        Build each with `job_spec` inside a SubmitRequest. A request without
        an idempotency key gets a fresh one here, so a retry of the whole
        batch after a lost answer creates nothing twice. If any item is
        refused, nothing is created and the error names it (`requests[i]…`).
        """
        keyed = job_service_pb2.BatchSubmitRequest()
        for request in requests:
            item = keyed.requests.add()
            item.CopyFrom(request)
            item.idempotency_key = item.idempotency_key or new_idempotency_key()
        response = await self._unary("BatchSubmit", self.stub.BatchSubmit, keyed, timeout)
        return list(response.responses)

    async def get(self, job_id: str, *, timeout: Timeout = USE_DEFAULT) -> job_pb2.Job:
        """The current state of a job."""
        request = job_service_pb2.GetRequest(job_id=job_id)
        response = await self._unary("Get", self.stub.Get, request, timeout)
        return response.job

    async def cancel(
        self, job_id: str, reason: str = "", *, timeout: Timeout = USE_DEFAULT
    ) -> job_service_pb2.CancelResponse:
        """Cancel a job; `cancelled` is false when it had already ended."""
        request = job_service_pb2.CancelRequest(job_id=job_id, reason=reason)
        return await self._unary("Cancel", self.stub.Cancel, request, timeout)

    async def list_jobs_page(
        self,
        *,
        filter: str = "",
        page_size: int = 0,
        page_token: str = "",
        timeout: Timeout = USE_DEFAULT,
    ) -> tuple[list[job_pb2.Job], str]:
        """One page of ListJobs, newest first: (jobs, next_page_token; "" on the last page)."""
        request = job_service_pb2.ListJobsRequest(
            filter=filter, page_size=page_size, page_token=page_token
        )
        response = await self._unary("ListJobs", self.stub.ListJobs, request, timeout)
        return list(response.jobs), response.next_page_token

    async def list_jobs(
        self, *, filter: str = "", page_size: int = 0
    ) -> AsyncIterator[list[job_pb2.Job]]:
        """Every page of a ListJobs walk, in order (a page may be empty)."""
        token = ""
        while True:
            jobs, token = await self.list_jobs_page(
                filter=filter, page_size=page_size, page_token=token
            )
            yield jobs
            if not token:
                return

    async def retry_job(self, job_id: str, *, timeout: Timeout = USE_DEFAULT) -> job_pb2.Job:
        """Put a FAILED or CANCELLED job (or a group's unfinished children) back to work."""
        request = job_service_pb2.RetryJobRequest(job_id=job_id)
        response = await self._unary("RetryJob", self.stub.RetryJob, request, timeout)
        return response.job

    async def list_workers(self, *, timeout: Timeout = USE_DEFAULT) -> list[job_pb2.Worker]:
        """The workers seen lately, most recently seen first (admin callers)."""
        request = job_service_pb2.ListWorkersRequest()
        response = await self._unary("ListWorkers", self.stub.ListWorkers, request, timeout)
        return list(response.workers)

    async def list_queues(self, *, timeout: Timeout = USE_DEFAULT) -> list[job_pb2.QueueStats]:
        """Queued and processing counts per model, priority and pool (admin callers)."""
        request = job_service_pb2.ListQueuesRequest()
        response = await self._unary("ListQueues", self.stub.ListQueues, request, timeout)
        return list(response.queues)

    async def watch(
        self, job_id: str, *, timeout: float | None = None
    ) -> AsyncGenerator[job_pb2.Job, None]:
        """Yield the job's snapshots (current first, then one per change) until terminal.

        A stream broken by UNAVAILABLE (or ended early by a draining server) is
        reopened with back-off; the reopened stream starts with the current
        snapshot, so nothing is missed but a snapshot may repeat. `timeout`
        bounds the whole watch (None: wait as long as the job takes).
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        request = job_service_pb2.StreamStatusRequest(job_id=job_id)
        failures = 0
        while True:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise DeadlineExceededError(f"watch {job_id}: deadline of {timeout}s exceeded")
            call = self.stub.StreamStatus(request, timeout=remaining, metadata=self.config.metadata)
            try:
                async for response in call:
                    failures = 0
                    yield response.job
                    if is_terminal(response.job):
                        return
                failures += 1
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error)
                failures += 1
                if error.code not in self.retry.retry_codes or failures >= self.retry.max_attempts:
                    raise error from rpc_error
            finally:
                call.cancel()
            await asyncio.sleep(self.retry.delay(failures))

    async def wait_for_result(self, job_id: str, *, timeout: float | None = None) -> job_pb2.Job:
        """Watch until the job is terminal and return that snapshot."""
        last: job_pb2.Job | None = None
        async for job in self.watch(job_id, timeout=timeout):
            last = job
        assert last is not None and is_terminal(last)
        return last

    async def _unary(
        self,
        name: str,
        method: grpc.aio.UnaryUnaryMultiCallable[Req, T],
        request: Req,
        timeout: Timeout,
    ) -> T:
        async def attempt(remaining: float | None) -> T:
            return await method(request, timeout=remaining, metadata=self.config.metadata)

        return await call_with_retry(
            attempt, policy=self.retry, timeout=self._deadline(timeout), what=name
        )


class SyncJobClient:
    """JobClient for synchronous code: the same methods, blocking.

    It runs its own event loop; do not use it from inside a running loop
    (use JobClient there).
    """

    def __init__(self, target: str | None = None, **options: Any) -> None:
        self._runner = asyncio.Runner()
        self._client = JobClient(target, **options)

    def __enter__(self) -> SyncJobClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel and the private event loop."""
        self._run(self._client.close())
        self._runner.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def submit(self, model: str, payload: bytes | str = b"", **options: Any) -> job_pb2.Job:
        """See JobClient.submit."""
        return self._run(self._client.submit(model, payload, **options))

    def submit_group(self, children: Sequence[job_pb2.JobSpec], **options: Any) -> job_pb2.Job:
        """See JobClient.submit_group."""
        return self._run(self._client.submit_group(children, **options))

    def submit_request(
        self, request: job_service_pb2.SubmitRequest, **options: Any
    ) -> job_service_pb2.SubmitResponse:
        """See JobClient.submit_request."""
        return self._run(self._client.submit_request(request, **options))

    def batch_submit(
        self, requests: Sequence[job_service_pb2.SubmitRequest], **options: Any
    ) -> list[job_service_pb2.SubmitResponse]:
        """See JobClient.batch_submit."""
        return self._run(self._client.batch_submit(requests, **options))

    def get(self, job_id: str, **options: Any) -> job_pb2.Job:
        """See JobClient.get."""
        return self._run(self._client.get(job_id, **options))

    def cancel(
        self, job_id: str, reason: str = "", **options: Any
    ) -> job_service_pb2.CancelResponse:
        """See JobClient.cancel."""
        return self._run(self._client.cancel(job_id, reason, **options))

    def wait_for_result(self, job_id: str, *, timeout: float | None = None) -> job_pb2.Job:
        """See JobClient.wait_for_result."""
        return self._run(self._client.wait_for_result(job_id, timeout=timeout))

    def watch(self, job_id: str, *, timeout: float | None = None) -> Iterator[job_pb2.Job]:
        """See JobClient.watch."""
        snapshots = self._client.watch(job_id, timeout=timeout)

        async def next_snapshot() -> job_pb2.Job:
            return await anext(snapshots)

        try:
            while True:
                try:
                    yield self._run(next_snapshot())
                except StopAsyncIteration:
                    return
        finally:
            self._run(snapshots.aclose())
