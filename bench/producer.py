"""The producer process: Submit calls through jobgate.JobClient, timed for the sink.

    python -m bench.producer --target HOST:PORT --model M --jobs N
        [--inflight K [--tenants T] | --batch B | --rate R] [--payload-bytes P]

Closed loop with K Submit calls in flight (1: one at a time), or BatchSubmit
calls of B jobs one at a time, or an open loop offering R Submits per second
(each call starts on schedule, whether the previous ones returned or not).
With T tenants (open-mode servers: x-jobgate-tenant), the closed loop's
callers take tenants "bench-0".. in turn, one JobClient each.
Every payload starts with its call's start time (bench.handlers.stamp). Prints
one JSON object: jobs, first_start, last_return, cpu_seconds (this process,
from the first call to the last return), or `unavailable` with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import grpc

from bench.handlers import stamp
from jobgate import JobClient
from jobgate.v1 import job_pb2, job_service_pb2


def payload(size: int) -> bytes:
    return stamp(time.time()).ljust(size, b"x")


def batch_submit_missing() -> str | None:
    """Why BatchSubmit cannot be measured, or None once the contract has it."""
    methods = job_service_pb2.DESCRIPTOR.services_by_name["JobService"].methods_by_name
    if "BatchSubmit" not in methods:
        return "not available (no BatchSubmit RPC)"
    return None


async def closed_loop(
    clients: Sequence[JobClient], model: str, jobs: int, inflight: int, size: int
) -> None:
    remaining = jobs

    async def caller(client: JobClient) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await client.submit(model, payload(size))

    await asyncio.gather(*(caller(clients[index % len(clients)]) for index in range(inflight)))


async def open_loop(client: JobClient, model: str, jobs: int, rate: float, size: int) -> None:
    start = time.monotonic()
    calls = []
    for index in range(jobs):
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        calls.append(asyncio.ensure_future(client.submit(model, payload(size))))
    await asyncio.gather(*calls)


async def batches(client: JobClient, model: str, jobs: int, batch: int, size: int) -> None:
    # Looked up by name: the stubs of a contract without BatchSubmit lack these.
    request_type: Any = getattr(job_service_pb2, "BatchSubmitRequest")  # noqa: B009
    call: Any = getattr(client.stub, "BatchSubmit")  # noqa: B009
    for first in range(0, jobs, batch):
        body = payload(size)
        items = [
            job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model, payload=body))
            for _ in range(min(batch, jobs - first))
        ]
        await call(request_type(requests=items), timeout=60)


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    if args.batch and (missing := batch_submit_missing()):
        return {"unavailable": missing}
    async with contextlib.AsyncExitStack() as stack:
        names = [None] if args.tenants == 1 else [f"bench-{i}" for i in range(args.tenants)]
        clients = [
            await stack.enter_async_context(JobClient(args.target, timeout=60, tenant=name))
            for name in names
        ]
        client = clients[0]
        cpu, first = time.process_time(), time.time()
        try:
            if args.batch:
                await batches(client, args.model, args.jobs, args.batch, args.payload_bytes)
            elif args.rate:
                await open_loop(client, args.model, args.jobs, args.rate, args.payload_bytes)
            else:
                await closed_loop(clients, args.model, args.jobs, args.inflight, args.payload_bytes)
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.UNIMPLEMENTED:
                return {"unavailable": "not available (server answers UNIMPLEMENTED)"}
            raise
        return {
            "jobs": args.jobs,
            "first_start": first,
            "last_return": time.time(),
            "cpu_seconds": time.process_time() - cpu,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--inflight", type=int, default=1)
    parser.add_argument("--tenants", type=int, default=1)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.0)
    parser.add_argument("--payload-bytes", type=int, default=256)
    result = asyncio.run(produce(parser.parse_args()))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
