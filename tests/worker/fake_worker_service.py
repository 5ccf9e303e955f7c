"""A scripted in-process WorkerService for timing-precise daemon tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import timestamp_pb2
from google.rpc import code_pb2

from jobgate.v1 import job_pb2, worker_service_pb2, worker_service_pb2_grpc
from tests.client.fake_job_service import Fail


@dataclass
class Seen:
    at: float
    request: Any


def deadline(seconds_from_now: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int((time.time() + seconds_from_now) * 1e9))
    return stamp


class FakeWorkerService(worker_service_pb2_grpc.WorkerServiceServicer):
    """Hands out queued jobs with a `lease`-second lease; scripts heartbeat/result answers."""

    def __init__(self, lease: float = 1.0, fast_path: bool = True) -> None:
        self.lease = lease
        #: Serve ReportAndClaim (else answer it UNIMPLEMENTED, as an older server).
        self.fast_path = fast_path
        self.queue: deque[worker_service_pb2.ClaimedJob] = deque()
        self.arrived = asyncio.Event()
        self.claims: list[Seen] = []
        self.heartbeats: list[Seen] = []
        self.results: list[Seen] = []
        self.heartbeat_script: deque[Any] = deque()
        self.result_script: deque[Any] = deque()
        self.acknowledged = asyncio.Event()
        #: Calls received, by method name (whatever they carried).
        self.calls: Counter[str] = Counter()
        #: ReportAndClaim calls that carried heartbeats.
        self.beat_calls: list[Seen] = []

    def add_job(self, job_id: str, payload: bytes = b"", attempts: int = 1) -> None:
        job = job_pb2.Job(id=job_id, model="m", status=job_pb2.JOB_STATUS_PROCESSING)
        job.attempts = attempts
        job.update_time.GetCurrentTime()
        claimed = worker_service_pb2.ClaimedJob(
            job=job,
            payload=payload,
            lease_id=f"lease-{job_id}",
            lease_expire_time=deadline(self.lease),
        )
        self.queue.append(claimed)
        self.arrived.set()

    async def ClaimNext(self, request: Any, context: Any) -> Any:
        self.calls["ClaimNext"] += 1
        self.claims.append(Seen(time.monotonic(), request))
        return worker_service_pb2.ClaimNextResponse(jobs=await self._claim(request))

    async def _claim(self, request: Any) -> list[worker_service_pb2.ClaimedJob]:
        if not self.queue:
            self.arrived.clear()
            wait = request.wait.ToTimedelta().total_seconds()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), wait)
        jobs = [self.queue.popleft() for _ in range(min(len(self.queue), request.max_jobs or 1))]
        for claimed in jobs:
            claimed.lease_expire_time.CopyFrom(deadline(self.lease))
        return jobs

    async def ReportAndClaim(self, request: Any, context: Any) -> Any:
        """Heartbeats, then results, each as its unary script says, then a claim.

        A scripted FAILED_PRECONDITION / NOT_FOUND / "cancel" answers that item
        only (as the real server does); any other Fail fails the whole call.
        """
        self.calls["ReportAndClaim"] += 1
        if not self.fast_path:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        response = worker_service_pb2.ReportAndClaimResponse()
        if request.heartbeats:
            self.beat_calls.append(Seen(time.monotonic(), request))
        for beat in request.heartbeats:
            self.heartbeats.append(Seen(time.monotonic(), beat))
            step = self.heartbeat_script.popleft() if self.heartbeat_script else None
            outcome = _ITEM_OUTCOMES.get(step.code if isinstance(step, Fail) else step)
            if isinstance(step, Fail) and outcome is None:
                status = step.status()
                await context.abort(status.code, status.details, status.trailing_metadata)
            applied = outcome is None
            response.heartbeats.add(
                job_id=beat.job_id,
                outcome=outcome or worker_service_pb2.REPORT_OUTCOME_APPLIED,
                lease_expire_time=deadline(self.lease) if applied else None,
                cancel_requested=step == "cancel",
            )
        for result in request.results:
            self.results.append(Seen(time.monotonic(), result))
            step = self.result_script.popleft() if self.result_script else None
            if isinstance(step, Fail):
                status = step.status()
                await context.abort(status.code, status.details, status.trailing_metadata)
            response.results.add(
                job_id=result.job_id, outcome=worker_service_pb2.REPORT_OUTCOME_APPLIED
            )
            self.acknowledged.set()
        if request.max_jobs:
            self.claims.append(Seen(time.monotonic(), request))
            response.jobs.extend(await self._claim(request))
        return response

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        self.calls["Heartbeat"] += 1
        self.heartbeats.append(Seen(time.monotonic(), request))
        step = self.heartbeat_script.popleft() if self.heartbeat_script else None
        if isinstance(step, Fail):
            status = step.status()
            await context.abort(status.code, status.details, status.trailing_metadata)
        return worker_service_pb2.HeartbeatResponse(
            lease_expire_time=deadline(self.lease), cancel_requested=step == "cancel"
        )

    async def SetResult(self, request: Any, context: Any) -> Any:
        self.calls["SetResult"] += 1
        self.results.append(Seen(time.monotonic(), request))
        step = self.result_script.popleft() if self.result_script else None
        if isinstance(step, Fail):
            status = step.status()
            await context.abort(status.code, status.details, status.trailing_metadata)
        self.acknowledged.set()
        return worker_service_pb2.SetResultResponse(job=job_pb2.Job(id=request.job_id))


#: Scripted heartbeat steps a ReportAndClaim answers in the item, not the call.
_ITEM_OUTCOMES: dict[object, worker_service_pb2.ReportOutcome.ValueType] = {
    code_pb2.FAILED_PRECONDITION: worker_service_pb2.REPORT_OUTCOME_LEASE_LOST,
    code_pb2.NOT_FOUND: worker_service_pb2.REPORT_OUTCOME_JOB_NOT_FOUND,
    "cancelled": worker_service_pb2.REPORT_OUTCOME_JOB_CANCELLED,
}


async def start(service: FakeWorkerService) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"
