"""The load process: many open StreamStatus streams and long-polling claims.

    python -m bench.load --job-target T --worker-target W --streams N --pollers M

Queues N jobs of a model no worker serves and keeps one StreamStatus open on
each; keeps M ClaimNext long-polls waiting on another idle model. Prints
"ready <n>" once every stream has its first snapshot and every poll has been
sent (n: opening calls that came back CANCELLED and were retried), then
holds the load until its stdin closes.
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
WAVE = 250  # streams opened at once
OPEN_ATTEMPTS = 5
StreamCall = grpc.aio.UnaryStreamCall[
    job_service_pb2.StreamStatusRequest, job_service_pb2.StreamStatusResponse
]
POLL_WAIT_SECONDS = 20


def channel(target: str) -> grpc.aio.Channel:
    # A local subchannel pool: each channel gets its own connection.
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


async def _open(stub: job_service_pb2_grpc.JobServiceAsyncStub, job_id: str) -> StreamCall | None:
    """A stream that has sent its first snapshot, or None when the call was cancelled."""
    call: StreamCall = stub.StreamStatus(job_service_pb2.StreamStatusRequest(job_id=job_id))
    try:
        await call.read()
    except grpc.aio.AioRpcError as error:
        if error.code() is not grpc.StatusCode.CANCELLED:
            raise
        return None
    return call


async def open_streams(target: str, count: int) -> tuple[list[StreamCall], int]:
    """`count` open streams, and how many opening calls came back CANCELLED first.

    Opened in waves, each stream retried while its call comes back CANCELLED
    (opening 2,000 at once, some do without reaching the handler).
    """
    channels = [channel(target) for _ in range(-(-count // STREAMS_PER_CHANNEL))]
    stubs = [job_service_pb2_grpc.JobServiceStub(c) for c in channels]
    spec = job_pb2.JobSpec(model=WATCHED_MODEL, payload=b"watched")
    ids: list[str] = []

    async def submitter(stub: job_service_pb2_grpc.JobServiceAsyncStub, jobs: int) -> None:
        for _ in range(jobs):
            ids.append((await stub.Submit(job_service_pb2.SubmitRequest(job=spec))).job.id)

    share = [min(STREAMS_PER_CHANNEL, count - i * STREAMS_PER_CHANNEL) for i in range(len(stubs))]
    await asyncio.gather(*(submitter(stub, jobs) for stub, jobs in zip(stubs, share, strict=True)))
    calls: list[StreamCall] = []
    cancelled = 0
    for first in range(0, count, WAVE):
        wave = list(enumerate(ids[first : first + WAVE], start=first))
        for _ in range(OPEN_ATTEMPTS):
            opened = await asyncio.gather(
                *(_open(stubs[index % len(stubs)], job_id) for index, job_id in wave)
            )
            calls.extend(call for call in opened if call is not None)
            wave = [item for item, call in zip(wave, opened, strict=True) if call is None]
            cancelled += len(wave)
            if not wave:
                break
        if wave:
            raise RuntimeError(f"{len(wave)} streams still cancelled after {OPEN_ATTEMPTS} tries")
    return calls, cancelled


async def poll_forever(stub: worker_service_pb2_grpc.WorkerServiceAsyncStub, index: int) -> None:
    request = worker_service_pb2.ClaimNextRequest(
        worker_id=f"bench-idle-{index}", models=[IDLE_MODEL]
    )
    request.wait.FromSeconds(POLL_WAIT_SECONDS)
    while True:
        await stub.ClaimNext(request, timeout=POLL_WAIT_SECONDS + 10)


async def hold(args: argparse.Namespace) -> None:
    calls, cancelled = await open_streams(args.job_target, args.streams)
    poll_channels = [channel(args.worker_target) for _ in range(-(-args.pollers // 100))]
    stubs = [worker_service_pb2_grpc.WorkerServiceStub(c) for c in poll_channels]
    polls = [
        asyncio.ensure_future(poll_forever(stubs[index // 100], index))
        for index in range(args.pollers)
    ]
    await asyncio.sleep(0.5)  # let every poll reach the server
    print(f"ready {cancelled}", flush=True)
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
