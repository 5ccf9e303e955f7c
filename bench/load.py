"""The load process: many open StreamStatus streams and long-polling claims.

    python -m bench.load --job-target T --worker-target W --streams N --pollers M

Queues N jobs of a model no worker serves and keeps one StreamStatus open on
each; keeps M ClaimNext long-polls waiting on another idle model. Prints
"ready" once every stream has its first snapshot and every poll has been
sent, then holds the load until its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import grpc

from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

WATCHED_MODEL = "bench-watched"
IDLE_MODEL = "bench-idle"
STREAMS_PER_CHANNEL = 100  # under HTTP/2's usual 100 concurrent streams per connection
POLL_WAIT_SECONDS = 20


def channel(target: str) -> grpc.aio.Channel:
    # A local subchannel pool: each channel gets its own connection.
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


async def open_streams(target: str, count: int) -> list[grpc.aio.UnaryStreamCall]:  # type: ignore[type-arg]
    channels = [channel(target) for _ in range(-(-count // STREAMS_PER_CHANNEL))]
    stubs = [job_service_pb2_grpc.JobServiceStub(c) for c in channels]
    spec = job_pb2.JobSpec(model=WATCHED_MODEL, payload=b"watched")
    ids: list[str] = []

    async def submitter(stub: job_service_pb2_grpc.JobServiceAsyncStub, jobs: int) -> None:
        for _ in range(jobs):
            ids.append((await stub.Submit(job_service_pb2.SubmitRequest(job=spec))).job.id)

    share = [min(STREAMS_PER_CHANNEL, count - i * STREAMS_PER_CHANNEL) for i in range(len(stubs))]
    await asyncio.gather(*(submitter(stub, jobs) for stub, jobs in zip(stubs, share, strict=True)))
    calls = [
        stubs[index // STREAMS_PER_CHANNEL].StreamStatus(
            job_service_pb2.StreamStatusRequest(job_id=job_id)
        )
        for index, job_id in enumerate(ids)
    ]
    await asyncio.gather(*(call.read() for call in calls))  # the first snapshot: open
    return calls


async def poll_forever(stub: worker_service_pb2_grpc.WorkerServiceAsyncStub, index: int) -> None:
    request = worker_service_pb2.ClaimNextRequest(
        worker_id=f"bench-idle-{index}", models=[IDLE_MODEL]
    )
    request.wait.FromSeconds(POLL_WAIT_SECONDS)
    while True:
        await stub.ClaimNext(request, timeout=POLL_WAIT_SECONDS + 10)


async def hold(args: argparse.Namespace) -> None:
    calls = await open_streams(args.job_target, args.streams)
    poll_channels = [channel(args.worker_target) for _ in range(-(-args.pollers // 100))]
    stubs = [worker_service_pb2_grpc.WorkerServiceStub(c) for c in poll_channels]
    polls = [
        asyncio.ensure_future(poll_forever(stubs[index // 100], index))
        for index in range(args.pollers)
    ]
    await asyncio.sleep(0.5)  # let every poll reach the server
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for task in polls:
        task.cancel()
    for call in calls:
        call.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--job-target", required=True)
    parser.add_argument("--worker-target", required=True)
    parser.add_argument("--streams", type=int, required=True)
    parser.add_argument("--pollers", type=int, required=True)
    asyncio.run(hold(parser.parse_args()))


if __name__ == "__main__":
    main()
