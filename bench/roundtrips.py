"""Redis round trips per RPC: client commands seen by MONITOR, background subtracted."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import grpc

from bench.monitor import RoundTripCounter
from bench.servers import Topology
from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

MODEL = "bench-trips"


def _submit_request(model: str) -> job_service_pb2.SubmitRequest:
    return job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model, payload=b"x" * 256))


async def _complete(
    workers: worker_service_pb2_grpc.WorkerServiceAsyncStub, claimed: worker_service_pb2.ClaimedJob
) -> None:
    await workers.SetResult(
        worker_service_pb2.SetResultRequest(
            job_id=claimed.job.id, lease_id=claimed.lease_id, status=job_pb2.JOB_STATUS_COMPLETED
        )
    )


async def round_trips(topology: Topology, calls: int) -> dict[str, dict[str, float]]:
    """Redis commands per RPC by name, background (recovery, probes) subtracted."""
    assert topology.redis is not None
    counter = RoundTripCounter(topology.redis.port)
    job_channel = grpc.aio.insecure_channel(topology.job_target)
    worker_channel = grpc.aio.insecure_channel(topology.worker_target)
    jobs = job_service_pb2_grpc.JobServiceStub(job_channel)
    workers = worker_service_pb2_grpc.WorkerServiceStub(worker_channel)
    result: dict[str, dict[str, float]] = {}

    async def settled() -> Counter[str]:
        await asyncio.sleep(0.1)  # MONITOR lines trail the replies a little
        return counter.snapshot()

    async def measure(name: str, action: Callable[[int], Awaitable[None]]) -> None:
        before, started = await settled(), time.perf_counter()
        for index in range(calls):
            await action(index)
        elapsed = time.perf_counter() - started
        during = await settled() - before
        idle_before, idle_start = counter.snapshot(), time.perf_counter()
        await asyncio.sleep(max(elapsed, 1.0))
        idle = counter.snapshot() - idle_before
        idle_seconds = time.perf_counter() - idle_start
        per_call = {
            command: (count - idle[command] / idle_seconds * (elapsed + 0.1)) / calls
            for command, count in during.items()
        }
        result[name] = {command: value for command, value in per_call.items() if value >= 0.05}

    submitted: list[str] = []
    claimed: list[worker_service_pb2.ClaimedJob] = []

    async def submit(_: int) -> None:
        submitted.append((await jobs.Submit(_submit_request(MODEL))).job.id)

    async def get(index: int) -> None:
        await jobs.Get(job_service_pb2.GetRequest(job_id=submitted[index]))

    async def claim(_: int) -> None:
        request = worker_service_pb2.ClaimNextRequest(worker_id="bench-trips", models=[MODEL])
        claimed.extend((await workers.ClaimNext(request)).jobs)

    async def heartbeat(index: int) -> None:
        job = claimed[index]
        await workers.Heartbeat(
            worker_service_pb2.HeartbeatRequest(
                job_id=job.job.id, lease_id=job.lease_id, progress=0.5, stage="bench"
            )
        )

    async def set_result(index: int) -> None:
        await _complete(workers, claimed[index])

    async def cancel(_: int) -> None:
        answer = await jobs.Submit(_submit_request("bench-cancel"))
        await jobs.Cancel(job_service_pb2.CancelRequest(job_id=answer.job.id))

    try:
        await measure("Submit", submit)
        await measure("Get", get)
        await measure("ClaimNext (job waiting)", claim)
        await measure("Heartbeat", heartbeat)
        await measure("SetResult", set_result)
        await measure("Submit + Cancel", cancel)
        both, submit_only = result.pop("Submit + Cancel"), result["Submit"]
        result["Cancel"] = {
            command: value - submit_only.get(command, 0.0)
            for command, value in both.items()
            if value - submit_only.get(command, 0.0) >= 0.05
        }
    finally:
        counter.close()
        await job_channel.close(None)
        await worker_channel.close(None)
    return result
