"""The fleet's figures in wall time: KEDA activation latency and the registry's Redis writes.

    python -m bench.fleet [--quick]

On `jobgate gateway` + `jobgate worker-server` processes over a private
redis-server (no persistence), as bench.servers starts them:

- activation: a StreamIsActive call on an idle model, then the first
  Submit; the time from sending the Submit to the stream saying "active"
  (DESIGN: within a second), and from the last job's SetResult to "idle";
- registry: WORKERS workers calling ClaimNext with wait 0 in a loop for
  SECONDS of wall time; the registry's Redis write commands (ZADD and HSET on
  the registry keys: no job is queued, so no claim writes either) against the
  bound of WORKERS x (SECONDS + 1) writes per worker-server.

The tests count the same things on a fake clock (tests/servers/
test_fleet_costs.py); this is the real-time run, for docs/keda.md.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import grpc.aio

from bench.commandstats import commandstats
from bench.report import ms, percentile
from bench.servers import on_redis
from jobgate.keda import externalscaler_pb2 as keda
from jobgate.keda import externalscaler_pb2_grpc
from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

WORKERS = 200
SECONDS = 10.0
ROUNDS = 20


async def _state(stream: Any) -> bool:
    message = await stream.read()
    assert isinstance(message, keda.IsActiveResponse), message
    return bool(message.result)


async def activation(job_target: str, worker_target: str, rounds: int) -> tuple[list[float], ...]:
    """(Submit -> active, SetResult -> idle) in seconds, one pair per idle model."""
    to_active: list[float] = []
    to_idle: list[float] = []
    async with (
        grpc.aio.insecure_channel(job_target) as job_channel,
        grpc.aio.insecure_channel(worker_target) as worker_channel,
    ):
        scaler = externalscaler_pb2_grpc.ExternalScalerStub(job_channel)
        jobs = job_service_pb2_grpc.JobServiceStub(job_channel)
        workers = worker_service_pb2_grpc.WorkerServiceStub(worker_channel)
        for index in range(rounds):
            model = f"bench-keda-{index}"
            ref = keda.ScaledObjectRef(scalerMetadata={"model": model})
            stream = scaler.StreamIsActive(ref, timeout=60)
            assert not await _state(stream)
            started = time.perf_counter()
            submit = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model))
            await jobs.Submit(submit, timeout=10)
            assert await _state(stream)
            to_active.append(time.perf_counter() - started)
            claim = worker_service_pb2.ClaimNextRequest(worker_id="bench", models=[model])
            [claimed] = (await workers.ClaimNext(claim, timeout=10)).jobs
            started = time.perf_counter()
            done = worker_service_pb2.SetResultRequest(
                job_id=claimed.job.id,
                lease_id=claimed.lease_id,
                status=job_pb2.JOB_STATUS_COMPLETED,
            )
            await workers.SetResult(done, timeout=10)
            assert not await _state(stream)
            to_idle.append(time.perf_counter() - started)
            stream.cancel()
    return to_active, to_idle


async def registry(worker_target: str, workers: int, seconds: float) -> int:
    """ClaimNext calls made by `workers` looping with wait 0 for `seconds`."""
    calls = 0
    deadline = time.monotonic() + seconds
    async with grpc.aio.insecure_channel(worker_target) as channel:
        stub = worker_service_pb2_grpc.WorkerServiceStub(channel)

        async def loop(worker_id: str) -> None:
            nonlocal calls
            request = worker_service_pb2.ClaimNextRequest(worker_id=worker_id, models=["idle"])
            while time.monotonic() < deadline:
                await stub.ClaimNext(request, timeout=10)
                calls += 1

        await asyncio.gather(*(loop(f"bench-gpu-{n:03d}") for n in range(workers)))
    return calls


async def listed(job_target: str) -> int:
    async with grpc.aio.insecure_channel(job_target) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        response = await stub.ListWorkers(job_service_pb2.ListWorkersRequest(), timeout=10)
        return len(response.workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: proves it runs")
    args = parser.parse_args()
    rounds, workers, seconds = (3, 10, 2.0) if args.quick else (ROUNDS, WORKERS, SECONDS)
    with on_redis(appendfsync=None) as topology:
        assert topology.redis is not None
        to_active, to_idle = asyncio.run(
            activation(topology.job_target, topology.worker_target, rounds)
        )
        before = commandstats(topology.redis)
        calls = asyncio.run(registry(topology.worker_target, workers, seconds))
        time.sleep(1.5)  # the last interval's flush (a measurement window, not a sync)
        after = commandstats(topology.redis)
        shown = asyncio.run(listed(topology.job_target))
    writes = sum((after - before)[name] for name in ("zadd", "hset"))
    print("| figure | value |\n| --- | --- |")
    for name, samples in (("Submit -> active", to_active), ("SetResult -> idle", to_idle)):
        cells = ", ".join(f"p{q} {ms(percentile(samples, q / 100))}" for q in (50, 99))
        print(f"| {name} ({len(samples)} idle models) | {cells}, max {ms(max(samples))} |")
    bound = int(workers * (seconds + 1))
    print(f"| registry: {workers} workers, {seconds:g} s, {calls} ClaimNext calls | "
          f"{writes} write commands (ZADD+HSET), bound {bound}; {shown} listed |")  # fmt: skip


if __name__ == "__main__":
    main()
