"""In-process servers for the server unit tests: both services on loopback port 0.

`Harness` owns a Serving (store, auth, metrics, drain state), the two started
grpc.aio servers and a channel to each, and offers small helpers that turn a
failed call into its code and google.rpc details.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gateway_server.scaler import ExternalScaler
from gateway_server.server import build_server as build_gateway
from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from serving.auth import Authenticator
from serving.instrumented import count_store_errors
from serving.metrics import Metrics, sample
from serving.settings import Address, ServerSettings
from serving.shared import Serving
from store.memory import LocalStore
from store.protocol import Store
from worker_server.registry import WorkerRegistry
from worker_server.server import build_server as build_worker

LOOPBACK = Address("127.0.0.1", 0)
EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]
Metadata = tuple[tuple[str, str], ...]


def seconds(value: float) -> duration_pb2.Duration:
    result = duration_pb2.Duration()
    result.FromNanoseconds(round(value * 1e9))
    return result


@dataclass
class Failure:
    code: grpc.StatusCode
    message: str
    reasons: list[str] = field(default_factory=list)
    retry_delay: float | None = None
    violations: list[str] = field(default_factory=list)


def failure_of(error: grpc.aio.AioRpcError) -> Failure:
    failure = Failure(error.code(), error.details() or "")
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            assert info.domain == "jobgate.dev"
            failure.reasons.append(info.reason)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            failure.retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            failure.violations.extend(v.field for v in bad.field_violations)
    return failure


async def next_job(stream: Any) -> job_pb2.Job:
    """The next snapshot of a StreamStatus call."""
    message = await stream.read()
    assert isinstance(message, job_service_pb2.StreamStatusResponse), message
    return message.job


async def rest_of(stream: Any) -> list[job_pb2.Job]:
    """Every remaining snapshot of a StreamStatus call, until it ends."""
    jobs = []
    while (message := await stream.read()) is not EOF:
        assert isinstance(message, job_service_pb2.StreamStatusResponse), message
        jobs.append(message.job)
    return jobs


async def fails(call: Any) -> Failure:
    """Await a call expected to fail; its Failure."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return failure_of(error)
    raise AssertionError("the call succeeded")


@dataclass
class Harness:
    serving: Serving
    servers: list[grpc.aio.Server]
    job_channel: grpc.aio.Channel
    worker_channel: grpc.aio.Channel
    job_port: int
    worker_port: int

    @property
    def job(self) -> job_service_pb2_grpc.JobServiceAsyncStub:
        return job_service_pb2_grpc.JobServiceStub(self.job_channel)

    @property
    def worker(self) -> worker_service_pb2_grpc.WorkerServiceAsyncStub:
        return worker_service_pb2_grpc.WorkerServiceStub(self.worker_channel)

    @property
    def metrics(self) -> Metrics:
        return self.serving.metrics

    async def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """A metric sample, read off the loop thread as a scrape would (see StoreCollector)."""
        return await asyncio.to_thread(sample, self.serving.metrics, name, labels)

    async def submit(self, model: str = "m", metadata: Metadata = (), **fields: Any) -> job_pb2.Job:
        request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model), **fields)
        response = await self.job.Submit(request, metadata=metadata, timeout=5)
        return response.job

    async def claim(
        self, models: Sequence[str] = ("m",), wait: float = 0.0, max_jobs: int = 0
    ) -> list[worker_service_pb2.ClaimedJob]:
        request = worker_service_pb2.ClaimNextRequest(
            worker_id="w1", models=list(models), wait=seconds(wait), max_jobs=max_jobs
        )
        response = await self.worker.ClaimNext(request, timeout=wait + 5)
        return list(response.jobs)

    async def complete(
        self, claimed: worker_service_pb2.ClaimedJob, result: bytes = b"ok"
    ) -> job_pb2.Job:
        request = worker_service_pb2.SetResultRequest(
            job_id=claimed.job.id,
            lease_id=claimed.lease_id,
            status=job_pb2.JOB_STATUS_COMPLETED,
            result=result,
        )
        return (await self.worker.SetResult(request, timeout=5)).job

    async def close(self) -> None:
        await self.job_channel.close(None)
        await self.worker_channel.close(None)
        await asyncio.gather(*(server.stop(0) for server in self.servers))
        await self.serving.store.close()


async def start_harness(
    settings: ServerSettings | None = None,
    auth: Authenticator | None = None,
    store: Store | None = None,
    registry: WorkerRegistry | None = None,
    scaler: Callable[[Serving], ExternalScaler] | None = None,
) -> Harness:
    settings = settings or ServerSettings()
    metrics = Metrics()
    inner = store or LocalStore(settings.store_settings())
    await inner.open()
    serving = Serving(
        settings, count_store_errors(inner, metrics), auth or Authenticator(None), metrics
    )
    metrics.watch_store(serving.store, asyncio.get_running_loop(), serving.auth.named_pools())
    keda = scaler(serving) if scaler is not None else None
    job_server, job_port = build_gateway(serving, LOOPBACK, keda)
    worker_server, worker_port = build_worker(serving, LOOPBACK, registry)
    for server in (job_server, worker_server):
        await server.start()
    await serving.health.set_serving(True)
    return Harness(
        serving=serving,
        servers=[job_server, worker_server],
        job_channel=grpc.aio.insecure_channel(f"127.0.0.1:{job_port}"),
        worker_channel=grpc.aio.insecure_channel(f"127.0.0.1:{worker_port}"),
        job_port=job_port,
        worker_port=worker_port,
    )
