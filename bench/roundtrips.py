"""Redis round trips per RPC: client commands seen by MONITOR, background subtracted.

Besides one call of each single-job RPC, the batched shapes the "one script
call per state change, or fewer per job where a batch shares one" target is
about: ReportAndClaim carrying one result and claiming one job, ReportAndClaim
carrying REPORT_BATCH results and heartbeats and claiming REPORT_BATCH jobs,
and BatchSubmit of SUBMIT_BATCH items. Each row says how many jobs one call
serves, so the report can give commands per call and per job.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias

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
WORKER_ID = "bench-trips"
REPORT_BATCH = 8  # results, heartbeats and claims in the batched ReportAndClaim
SUBMIT_BATCH = 100  # items per BatchSubmit, as the end-to-end BatchSubmit producer
CLAIM_CAP = 64  # the most jobs one claim hands out
# The async stub types exist only in the .pyi files, so the aliases are strings.
JobStub: TypeAlias = "job_service_pb2_grpc.JobServiceAsyncStub"
WorkerStub: TypeAlias = "worker_service_pb2_grpc.WorkerServiceAsyncStub"
Claimed = worker_service_pb2.ClaimedJob
APPLIED = worker_service_pb2.REPORT_OUTCOME_APPLIED


@dataclass(frozen=True)
class Trips:
    """Client commands per call of one RPC shape, and how many jobs one call serves."""

    commands: dict[str, float]  # command name -> count per call
    jobs: int = 1

    @property
    def per_call(self) -> float:
        return sum(self.commands.values())

    @property
    def per_job(self) -> float:
        return self.per_call / self.jobs


def _submit_request(model: str) -> job_service_pb2.SubmitRequest:
    return job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model, payload=b"x" * 256))


def _completed(claimed: Claimed) -> worker_service_pb2.SetResultRequest:
    return worker_service_pb2.SetResultRequest(
        job_id=claimed.job.id, lease_id=claimed.lease_id, status=job_pb2.JOB_STATUS_COMPLETED
    )


def _beat(claimed: Claimed) -> worker_service_pb2.HeartbeatRequest:
    return worker_service_pb2.HeartbeatRequest(
        job_id=claimed.job.id, lease_id=claimed.lease_id, progress=0.5, stage="bench"
    )


async def _batch_submit(jobs: JobStub, model: str, count: int) -> None:
    request = job_service_pb2.BatchSubmitRequest(
        requests=[_submit_request(model) for _ in range(count)]
    )
    await jobs.BatchSubmit(request)


async def _queue(jobs: JobStub, model: str, count: int) -> None:
    """Queue `count` jobs of `model` (set-up, off the clock)."""
    for first in range(0, count, SUBMIT_BATCH):
        await _batch_submit(jobs, model, min(SUBMIT_BATCH, count - first))


async def _claim(workers: WorkerStub, model: str, count: int) -> list[Claimed]:
    """Claim `count` queued jobs of `model` (set-up, off the clock)."""
    claimed: list[Claimed] = []
    while len(claimed) < count:
        request = worker_service_pb2.ClaimNextRequest(
            worker_id=WORKER_ID, models=[model], max_jobs=min(CLAIM_CAP, count - len(claimed))
        )
        answer = await workers.ClaimNext(request)
        if not answer.jobs:
            raise RuntimeError(f"only {len(claimed)} of {count} {model} jobs could be claimed")
        claimed.extend(answer.jobs)
    return claimed


class Reporter:
    """ReportAndClaim calls in a worker's steady state.

    Each call ends the jobs the previous call claimed, extends the leases of
    `beating` (jobs held throughout) and claims `batch` queued jobs.
    """

    def __init__(
        self, workers: WorkerStub, model: str, batch: int, held: list[Claimed],
        beating: list[Claimed],
    ) -> None:  # fmt: skip
        self.workers, self.model, self.batch = workers, model, batch
        self.held, self.beating = held, beating

    async def call(self, _: int) -> None:
        request = worker_service_pb2.ReportAndClaimRequest(
            worker_id=WORKER_ID, models=[self.model], max_jobs=self.batch,
            results=[_completed(job) for job in self.held],
            heartbeats=[_beat(job) for job in self.beating],
        )  # fmt: skip
        answer = await self.workers.ReportAndClaim(request)
        outcomes = {item.outcome for item in answer.results}
        outcomes |= {item.outcome for item in answer.heartbeats}
        if len(answer.jobs) != self.batch or outcomes - {APPLIED}:
            raise RuntimeError(f"ReportAndClaim did not apply every item: {answer}")
        self.held = list(answer.jobs)


async def reporter(
    jobs: JobStub, workers: WorkerStub, model: str, calls: int, batch: int, beats: int
) -> Reporter:
    """A Reporter for `calls` calls: their jobs queued, the first results and beats held."""
    await _queue(jobs, model, (calls + 1) * batch + beats)
    held = await _claim(workers, model, batch + beats)
    return Reporter(workers, model, batch, held[:batch], held[batch:])


class Session:
    """MONITOR on the topology's Redis and one channel to each server."""

    def __init__(self, topology: Topology, calls: int) -> None:
        assert topology.redis is not None
        self.calls = calls
        self.counter = RoundTripCounter(topology.redis.port)
        self.job_channel = grpc.aio.insecure_channel(topology.job_target)
        self.worker_channel = grpc.aio.insecure_channel(topology.worker_target)
        self.jobs: JobStub = job_service_pb2_grpc.JobServiceStub(self.job_channel)
        self.workers: WorkerStub = worker_service_pb2_grpc.WorkerServiceStub(self.worker_channel)

    async def _settled(self) -> Counter[str]:
        await asyncio.sleep(0.1)  # MONITOR lines trail the replies a little
        return self.counter.snapshot()

    async def measure(self, action: Callable[[int], Awaitable[None]], jobs: int = 1) -> Trips:
        """Commands per call of `calls` calls of `action`, the idle rate after them subtracted."""
        before, started = await self._settled(), time.perf_counter()
        for index in range(self.calls):
            await action(index)
        elapsed = time.perf_counter() - started
        during = await self._settled() - before
        idle_before, idle_start = self.counter.snapshot(), time.perf_counter()
        await asyncio.sleep(max(elapsed, 1.0))
        idle = self.counter.snapshot() - idle_before
        idle_seconds = time.perf_counter() - idle_start
        per_call = {
            command: (count - idle[command] / idle_seconds * (elapsed + 0.1)) / self.calls
            for command, count in during.items()
        }
        return Trips({command: value for command, value in per_call.items() if value >= 0.05}, jobs)

    async def close(self) -> None:
        self.counter.close()
        await self.job_channel.close(None)
        await self.worker_channel.close(None)


def _less(both: Trips, part: Trips) -> Trips:
    """The commands of `both` that `part` does not account for."""
    commands = {
        command: value - part.commands.get(command, 0.0) for command, value in both.commands.items()
    }
    return Trips({command: value for command, value in commands.items() if value >= 0.05})


async def _single_job_rpcs(session: Session) -> dict[str, Trips]:
    jobs, workers = session.jobs, session.workers
    submitted: list[str] = []
    claimed: list[Claimed] = []

    async def submit(_: int) -> None:
        submitted.append((await jobs.Submit(_submit_request(MODEL))).job.id)

    async def get(index: int) -> None:
        await jobs.Get(job_service_pb2.GetRequest(job_id=submitted[index]))

    async def claim(_: int) -> None:
        request = worker_service_pb2.ClaimNextRequest(worker_id=WORKER_ID, models=[MODEL])
        claimed.extend((await workers.ClaimNext(request)).jobs)

    async def heartbeat(index: int) -> None:
        await workers.Heartbeat(_beat(claimed[index]))

    async def set_result(index: int) -> None:
        await workers.SetResult(_completed(claimed[index]))

    async def cancel(_: int) -> None:
        answer = await jobs.Submit(_submit_request("bench-cancel"))
        await jobs.Cancel(job_service_pb2.CancelRequest(job_id=answer.job.id))

    result = {"Submit": await session.measure(submit), "Get": await session.measure(get)}
    result["ClaimNext (job waiting)"] = await session.measure(claim)
    result["Heartbeat"] = await session.measure(heartbeat)
    result["SetResult"] = await session.measure(set_result)
    result["Cancel"] = _less(await session.measure(cancel), result["Submit"])
    return result


async def _batched_rpcs(session: Session) -> dict[str, Trips]:
    jobs, workers, calls, batch = session.jobs, session.workers, session.calls, REPORT_BATCH
    one = await reporter(jobs, workers, "bench-trips-report-1", calls, 1, 0)
    result = {"ReportAndClaim (1 result + claim 1, job waiting)": await session.measure(one.call)}
    several = await reporter(jobs, workers, f"bench-trips-report-{batch}", calls, batch, batch)
    name = f"ReportAndClaim ({batch} results + {batch} heartbeats + claim {batch}, jobs waiting)"
    result[name] = await session.measure(several.call, jobs=batch)

    async def batch_submit(_: int) -> None:
        await _batch_submit(jobs, "bench-trips-batch", SUBMIT_BATCH)

    result[f"BatchSubmit of {SUBMIT_BATCH}"] = await session.measure(batch_submit, SUBMIT_BATCH)
    return result


async def round_trips(topology: Topology, calls: int) -> dict[str, Trips]:
    """Redis commands per call by RPC shape, background (recovery, probes) subtracted."""
    session = Session(topology, calls)
    try:
        return {**await _single_job_rpcs(session), **await _batched_rpcs(session)}
    finally:
        await session.close()
