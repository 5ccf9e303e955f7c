"""Cost against queue depth: Submit, ClaimNext and Get (with queue position).

The queue is filled through the store's own submit script, pipelined (the
RedisStore builds each job's spec, as Submit does), so 1,000,000 jobs take
minutes instead of the hours 1M gRPC calls would; Redis `used_memory` per
queued job comes from the same fill, with a 1 KiB payload.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from redis.asyncio import Redis

from bench.sampling import timed
from bench.servers import Topology
from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from store.model import JobSpec, StoreSettings, SubmitRequest
from store.redis import RedisStore
from store.redis.calls import ScriptCall
from store.redis.partition import _spec_declared
from store.redis.scripts import ArgValue, read_script

MODEL = "bench-depth"
PAYLOAD = b"x" * 1024
TENANT = "default"  # the servers run open: a call without tenant metadata is "default"
PIPELINE = 1000  # submits per pipeline
PIPELINES_IN_FLIGHT = 2  # one being built while Redis runs the other
# Untimed calls of each kind before the timed ones at every depth: the first
# calls after a fill of 900k jobs meet cold caches and a keyspace that Redis
# may still be rehashing, which is the fill's cost, not the depth's.
WARMUP_CALLS = 50


@dataclass(frozen=True)
class DepthRow:
    depth: int  # jobs queued when probed
    submit: list[float]  # seconds per call
    get: list[float]
    claim: list[float]
    position: int  # the probe job's queue_position as Get answered it
    fill_rate: float  # jobs/s of the bulk fill up to this depth
    memory_per_job: float  # bytes of used_memory per queued job, over the fill
    # Redis's own time over the timed probes (INFO commandstats usec): per
    # script call, and per command the scripts ran. They separate the cost of
    # the scripts' work from what grows with the dataset's size in memory.
    script_usec: float
    command_usec: float


class BulkFiller:
    """Queues jobs through RedisStore's submit script, many per round trip: copies of
    `requests` in turn (by default one tenant's job of MODEL)."""

    def __init__(self, url: str, requests: Sequence[SubmitRequest] = ()) -> None:
        big = 10**9
        self.store = RedisStore(url, StoreSettings(max_live_per_tenant=big, max_live_total=big))
        self.client = Redis.from_url(url)
        self.sha = read_script("submit").sha
        default = SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL, payload=PAYLOAD))
        turns = [(request, request.fingerprint()) for request in requests or [default]]
        self._requests = itertools.cycle(turns)

    async def _pipeline(self, count: int) -> None:
        part, settings = self.store.engine.owner, self.store.settings
        pipe = self.client.pipeline(transaction=False)
        for _ in range(count):
            request, fingerprint = next(self._requests)
            head: list[ArgValue] = [request.tenant, fingerprint, settings.max_live_per_tenant,
                    settings.max_live_total, settings.max_group_children]  # fmt: skip
            spec, payloads = part._spec(request)  # a fresh id per job, as submit()
            # Every transition's last KEY is its own operation key (exactly once per
            # call); the job's id and model are declared (store/lua/includes/declared.lua).
            call = ScriptCall(
                "submit", [*head, json.dumps(spec), 0, *payloads], _spec_declared(spec),
                trailing=[part._op_key()],
            )  # fmt: skip
            call_keys, args = call.keys_and_args(part.keys, part._common_args())
            pipe.evalsha(self.sha, len(call_keys), *call_keys, *args)
        replies = await pipe.execute()
        refused = [reply for reply in replies if not (isinstance(reply, list) and reply[0] == 1)]
        if refused:
            raise RuntimeError(f"{len(refused)} bulk submits refused, first: {refused[0]!r}")

    async def fill(self, count: int, deadline: float) -> int:
        """Queue `count` jobs or as many as fit before `deadline` (monotonic)."""
        done = 0
        while done < count and time.monotonic() < deadline:
            sizes = [min(PIPELINE, count - done - i * PIPELINE) for i in range(PIPELINES_IN_FLIGHT)]
            sizes = [size for size in sizes if size > 0]
            await asyncio.gather(*(self._pipeline(size) for size in sizes))
            done += sum(sizes)
        return done

    async def redis_usec(self) -> dict[str, tuple[int, int]]:
        """INFO commandstats: command -> (calls, usec)."""
        stats = await self.client.info("commandstats")
        return {name: (int(row["calls"]), int(row["usec"])) for name, row in stats.items()}

    async def used_memory(self) -> int:
        info = await self.client.info("memory")
        return int(info["used_memory"])

    async def close(self) -> None:
        await self.client.aclose()
        await self.store.close()


async def probe(
    jobs: job_service_pb2_grpc.JobServiceAsyncStub,
    workers: worker_service_pb2_grpc.WorkerServiceAsyncStub,
    calls: int,
) -> tuple[list[float], list[float], list[float], int]:
    """Submit `calls` jobs, Get the last one `calls` times, claim and complete `calls`."""
    submitted: list[str] = []

    async def submit() -> None:
        spec = job_pb2.JobSpec(model=MODEL, payload=PAYLOAD)
        answer = await jobs.Submit(job_service_pb2.SubmitRequest(job=spec))
        submitted.append(answer.job.id)

    submit_samples = await timed(calls, submit)
    positions: list[int] = []

    async def get() -> None:
        answer = await jobs.Get(job_service_pb2.GetRequest(job_id=submitted[-1]))
        positions.append(answer.job.queue_position)

    get_samples = await timed(calls, get)
    claimed: list[worker_service_pb2.ClaimedJob] = []

    async def claim() -> None:
        request = worker_service_pb2.ClaimNextRequest(worker_id="bench-depth", models=[MODEL])
        claimed.extend((await workers.ClaimNext(request)).jobs)

    claim_samples = await timed(calls, claim)
    for job in claimed:  # completed off the clock, so the depth stays as filled
        await workers.SetResult(
            worker_service_pb2.SetResultRequest(
                job_id=job.job.id, lease_id=job.lease_id, status=job_pb2.JOB_STATUS_COMPLETED
            )
        )
    return submit_samples, get_samples, claim_samples, positions[-1]


async def depth_rows(
    topology: Topology, depths: list[int], calls: int, fill_budget: float
) -> tuple[list[DepthRow], str]:
    """One row per depth reached; the note says where the fill budget stopped it."""
    assert topology.redis is not None
    filler = BulkFiller(topology.redis.url)
    job_channel = grpc.aio.insecure_channel(topology.job_target)
    worker_channel = grpc.aio.insecure_channel(topology.worker_target)
    jobs = job_service_pb2_grpc.JobServiceStub(job_channel)
    workers = worker_service_pb2_grpc.WorkerServiceStub(worker_channel)
    rows: list[DepthRow] = []
    note = ""
    queued, deadline = 0, time.monotonic() + fill_budget
    memory_start = await filler.used_memory()
    try:
        for depth in depths:
            started = time.monotonic()
            added = await filler.fill(depth - queued, deadline)
            rate = added / max(1e-9, time.monotonic() - started)
            queued += added
            if queued < depth:
                note = f"fill stopped at {queued} queued jobs (budget {fill_budget:.0f}s)"
                break
            per_job = (await filler.used_memory() - memory_start) / queued
            await probe(jobs, workers, WARMUP_CALLS)
            usec_before = await filler.redis_usec()
            submit, get, claim, position = await probe(jobs, workers, calls)
            script_usec, command_usec = _redis_usec(usec_before, await filler.redis_usec())
            rows.append(DepthRow(depth, submit, get, claim, position, rate, per_job,
                                 script_usec, command_usec))  # fmt: skip
    finally:
        await filler.close()
        await job_channel.close(None)
        await worker_channel.close(None)
    return rows, note


def _redis_usec(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> tuple[float, float]:
    """Redis usec per EVALSHA, and per other command, between two commandstats reads."""
    script_calls = script_usec = command_calls = command_usec = 0
    for name, (calls, usec) in after.items():
        calls_before, usec_before = before.get(name, (0, 0))
        if name == "cmdstat_evalsha":
            script_calls, script_usec = calls - calls_before, usec - usec_before
        elif name != "cmdstat_info":
            command_calls += calls - calls_before
            command_usec += usec - usec_before
    return script_usec / max(1, script_calls), command_usec / max(1, command_calls)
