"""The jobgate benchmark: figures and ratios from one run.

    python -m bench.run [--quick] [--out bench/RESULTS.md]

Sections:
1. Dispatch latency of an idle worker: Submit returns -> a waiting ClaimNext
   returns, on the embedded store and on Redis.
2. Redis round trips per RPC (INFO commandstats deltas on a private Redis).
3. Throughput through gRPC: submit, then claim (batches) and complete.
4. Lookup cost against queue depth: Get (with queue_position) and ClaimNext
   at depths 1k / 10k / 100k; the ratio shows O(log N), not O(N).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import grpc

from bench.monitor import RoundTripCounter
from bench.servers import Topology, embedded, environment_note, on_redis
from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

TENANT = (("x-jobgate-tenant", "bench"),)


@dataclass
class Clients:
    jobs: job_service_pb2_grpc.JobServiceAsyncStub
    workers: worker_service_pb2_grpc.WorkerServiceAsyncStub


def _connect(topology: Topology) -> tuple[Clients, list[grpc.aio.Channel]]:
    job_channel = grpc.aio.insecure_channel(topology.job_target)
    worker_channel = grpc.aio.insecure_channel(topology.worker_target)
    clients = Clients(
        job_service_pb2_grpc.JobServiceStub(job_channel),
        worker_service_pb2_grpc.WorkerServiceStub(worker_channel),
    )
    return clients, [job_channel, worker_channel]


def _submit_request(
    model: str, priority: job_pb2.Priority.ValueType = job_pb2.PRIORITY_BATCH
) -> job_service_pb2.SubmitRequest:
    return job_service_pb2.SubmitRequest(
        priority=priority, job=job_pb2.JobSpec(model=model, payload=b"x" * 256)
    )


def _claim_request(
    model: str, wait: float, max_jobs: int = 1
) -> worker_service_pb2.ClaimNextRequest:
    request = worker_service_pb2.ClaimNextRequest(
        worker_id="bench-worker", models=[model], max_jobs=max_jobs
    )
    request.wait.FromNanoseconds(int(wait * 1e9))
    return request


async def _complete(clients: Clients, claimed: worker_service_pb2.ClaimedJob) -> None:
    await clients.workers.SetResult(
        worker_service_pb2.SetResultRequest(
            job_id=claimed.job.id,
            lease_id=claimed.lease_id,
            status=job_pb2.JOB_STATUS_COMPLETED,
            result=b"ok",
        )
    )


def _percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return at(0.50), at(0.95), at(0.99)


# 1. dispatch latency ---------------------------------------------------------


async def dispatch_latency(topology: Topology, samples: int) -> list[float]:
    """Seconds from Submit returning to an already-waiting ClaimNext returning."""
    clients, channels = _connect(topology)
    model = "bench-dispatch"
    latencies: list[float] = []
    try:
        for _ in range(samples):
            claim = asyncio.ensure_future(clients.workers.ClaimNext(_claim_request(model, 10.0)))
            await asyncio.sleep(0.02)  # let the claim reach the server and start waiting
            await clients.jobs.Submit(_submit_request(model), metadata=TENANT)
            submitted = time.perf_counter()
            answer = await claim
            latencies.append(time.perf_counter() - submitted)
            for claimed in answer.jobs:
                await _complete(clients, claimed)
    finally:
        for channel in channels:
            await channel.close(None)
    return latencies


# 2. round trips ----------------------------------------------------------------


async def round_trips(topology: Topology, calls: int) -> dict[str, dict[str, float]]:
    """Redis commands per RPC by name, background (recovery, probes) subtracted."""
    assert topology.redis is not None
    counter = RoundTripCounter(topology.redis.port)
    clients, channels = _connect(topology)
    model = "bench-trips"
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
        answer = await clients.jobs.Submit(_submit_request(model), metadata=TENANT)
        submitted.append(answer.job.id)

    async def get(index: int) -> None:
        await clients.jobs.Get(job_service_pb2.GetRequest(job_id=submitted[index]), metadata=TENANT)

    async def claim(_: int) -> None:
        answer = await clients.workers.ClaimNext(_claim_request(model, 0.0))
        claimed.extend(answer.jobs)

    async def heartbeat(index: int) -> None:
        job = claimed[index]
        await clients.workers.Heartbeat(
            worker_service_pb2.HeartbeatRequest(
                job_id=job.job.id, lease_id=job.lease_id, progress=0.5, stage="bench"
            )
        )

    async def set_result(index: int) -> None:
        await _complete(clients, claimed[index])

    async def cancel(_: int) -> None:
        answer = await clients.jobs.Submit(_submit_request("bench-cancel"), metadata=TENANT)
        await clients.jobs.Cancel(
            job_service_pb2.CancelRequest(job_id=answer.job.id), metadata=TENANT
        )

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
        for channel in channels:
            await channel.close(None)
    return result


# 3. throughput -----------------------------------------------------------------


async def throughput(topology: Topology, jobs: int, concurrency: int) -> dict[str, float]:
    clients, channels = _connect(topology)
    model = "bench-throughput"
    try:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for index in range(jobs):
            queue.put_nowait(index)

        async def submitter() -> None:
            while not queue.empty():
                queue.get_nowait()
                await clients.jobs.Submit(_submit_request(model), metadata=TENANT)

        started = time.perf_counter()
        await asyncio.gather(*(submitter() for _ in range(concurrency)))
        submit_rate = jobs / (time.perf_counter() - started)

        done = 0

        async def worker() -> None:
            nonlocal done
            while done < jobs:
                answer = await clients.workers.ClaimNext(_claim_request(model, 0.2, max_jobs=8))
                for claimed in answer.jobs:
                    await _complete(clients, claimed)
                    done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        complete_rate = jobs / (time.perf_counter() - started)
    finally:
        for channel in channels:
            await channel.close(None)
    return {"submit jobs/s": submit_rate, "claim+complete jobs/s": complete_rate}


# 4. lookup cost vs depth -------------------------------------------------------


async def lookup_cost(
    topology: Topology, depths: list[int], probes: int
) -> list[tuple[int, float, float]]:
    """(depth, Get-with-position ms, ClaimNext ms) with `depth` jobs queued ahead."""
    clients, channels = _connect(topology)
    rows: list[tuple[int, float, float]] = []
    filled = 0
    model = "bench-depth"
    try:
        for depth in depths:
            filled = await _fill(clients, model, depth - filled) + filled
            # The probe job sits behind `depth` others: its position is O(log N) to compute.
            probe = await clients.jobs.Submit(_submit_request(model), metadata=TENANT)
            request = job_service_pb2.GetRequest(job_id=probe.job.id)
            started = time.perf_counter()
            for _ in range(probes):
                answer = await clients.jobs.Get(request, metadata=TENANT)
            get_ms = (time.perf_counter() - started) / probes * 1000
            assert answer.job.queue_position == depth, answer.job.queue_position
            started = time.perf_counter()
            claimed: list[worker_service_pb2.ClaimedJob] = []
            for _ in range(probes):
                claimed.extend((await clients.workers.ClaimNext(_claim_request(model, 0))).jobs)
            claim_ms = (time.perf_counter() - started) / probes * 1000
            # Put the depth back: complete what we claimed and refill.
            await asyncio.gather(*(_complete(clients, job) for job in claimed))
            filled = filled + 1 - len(claimed)
            rows.append((depth, get_ms, claim_ms))
    finally:
        for channel in channels:
            await channel.close(None)
    return rows


async def _fill(clients: Clients, model: str, count: int, concurrency: int = 32) -> int:
    remaining = count

    async def one() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await clients.jobs.Submit(_submit_request(model), metadata=TENANT)

    await asyncio.gather(*(one() for _ in range(concurrency)))
    return count


# report --------------------------------------------------------------------------


def _breakdown(per_command: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in sorted(per_command.items()))


def _table(header: list[str], rows: list[list[str]]) -> Iterator[str]:
    yield "| " + " | ".join(header) + " |"
    yield "|" + "|".join(" --- " for _ in header) + "|"
    for row in rows:
        yield "| " + " | ".join(row) + " |"


async def main_async(quick: bool) -> list[str]:
    samples = 30 if quick else 200
    lines = [f"# jobgate benchmark, {datetime.now():%Y-%m-%d %H:%M}", "", environment_note(), ""]

    lines += ["## 1. Idle worker dispatch latency (Submit returns -> ClaimNext returns)", ""]
    rows = []
    for start in (embedded, on_redis):
        with start() as topology:
            p50, p95, p99 = _percentiles(await dispatch_latency(topology, samples))
            rows.append([topology.name, str(samples), f"{p50 * 1000:.2f}", f"{p95 * 1000:.2f}",
                         f"{p99 * 1000:.2f}"])  # fmt: skip
    lines += [*_table(["topology", "samples", "p50 ms", "p95 ms", "p99 ms"], rows), ""]

    lines += ["## 2. Redis round trips per RPC (gateway + worker-server on Redis)", ""]
    with on_redis() as topology:
        trips = await round_trips(topology, 50 if quick else 200)
    rows = [[name, f"{sum(per_command.values()):.2f}", _breakdown(per_command)]
            for name, per_command in trips.items()]  # fmt: skip
    lines += [*_table(["RPC", "commands per call", "by command"], rows), ""]
    lines += [
        "EVALSHA is the transition's one script. XREAD, where it shows, is the audit-log",
        "tail of the recovery leader waking on the new event (off the RPC's path).",
        "",
    ]

    lines += ["## 3. Throughput through gRPC (16 concurrent callers, ClaimNext max_jobs=8)", ""]
    rows = []
    jobs = 500 if quick else 5000
    for start in (embedded, on_redis):
        with start() as topology:
            rates = await throughput(topology, jobs, 16)
            rows.append([topology.name, str(jobs), f"{rates['submit jobs/s']:.0f}",
                         f"{rates['claim+complete jobs/s']:.0f}"])  # fmt: skip
    lines += [*_table(["topology", "jobs", "submit jobs/s", "claim+complete jobs/s"], rows), ""]

    depths = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    lines += [f"## 4. Lookup cost against queue depth (Redis, {', '.join(map(str, depths))})", ""]
    with on_redis() as topology:
        cost = await lookup_cost(topology, depths, 50 if quick else 200)
    base_get, base_claim = cost[0][1], cost[0][2]
    rows = [[str(depth), f"{get_ms:.3f}", f"{get_ms / base_get:.2f}", f"{claim_ms:.3f}",
             f"{claim_ms / base_claim:.2f}"] for depth, get_ms, claim_ms in cost]  # fmt: skip
    header = ["queue depth", "Get ms", "Get ratio", "ClaimNext ms", "ClaimNext ratio"]
    lines += [*_table(header, rows), ""]
    lines.append("A ratio near 1.0 while depth grows 100x is the O(log N) claim and position.")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()
    lines = asyncio.run(main_async(args.quick))
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
