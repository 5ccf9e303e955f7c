"""2,000 open StreamStatus streams and 200 long polls on one gateway / worker-server.

Issue 10 item 6: streams must not hold a Redis connection of their own, nor
starve recovery, and end only at their terminal snapshot, the caller's
leaving, or a drain (gRPC core used to drop ~9% of a burst as CANCELLED).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from store.redis.connection import CONTROL_CONNECTIONS, POOL_CONNECTIONS
from tests.e2e.api import QUEUED, TERMINAL, Api, fresh_name, tenant_metadata
from tests.e2e.harness import Deployment
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.timings import Timings

STREAMS = 2000
CHANNELS = 20
LONG_POLLS = 200
BATCH = 100  # concurrent calls while setting up
# Per server process: the RPC pool, the control pool, pub/sub, the audit log's XREAD.
PER_PROCESS = POOL_CONNECTIONS + CONTROL_CONNECTIONS + 2


@dataclass
class Crowd:
    """Open streams (one per job) and long polls on a model nobody submits to."""

    job_ids: list[str]
    last_status: dict[str, int] = field(default_factory=dict)
    ended: dict[str, str] = field(default_factory=dict)  # job id -> final code name
    poll_errors: list[str] = field(default_factory=list)


async def in_batches(calls: list[Awaitable[Any]]) -> list[Any]:
    results: list[Any] = []
    for start in range(0, len(calls), BATCH):
        results += await asyncio.gather(*calls[start : start + BATCH])
    return results


@asynccontextmanager
async def crowd(deployment: Deployment) -> AsyncIterator[tuple[Crowd, Api]]:
    metadata = tenant_metadata(fresh_name("t"))
    worker_channel = grpc.aio.insecure_channel(deployment.worker_target)
    job_channels = [grpc.aio.insecure_channel(deployment.job_target) for _ in range(CHANNELS)]
    apis = [Api(channel, worker_channel, metadata) for channel in job_channels]
    model, idle = fresh_name("crowd"), fresh_name("idle")
    submitted = await in_batches([apis[0].submit(model) for _ in range(STREAMS)])
    state = Crowd([job.id for job in submitted])

    async def follow(api: Api, job_id: str) -> None:
        code = "OK"
        try:
            async for response in api.stream(job_id, timeout=120):
                state.last_status[job_id] = response.job.status
        except grpc.aio.AioRpcError as error:
            code = error.code().name
        state.ended[job_id] = code

    async def poll(index: int) -> None:
        poller = Api(job_channels[0], worker_channel, metadata, worker_id=f"poller-{index}")
        while True:
            try:
                assert await poller.claim([idle], wait=30) == []
            except grpc.aio.AioRpcError as error:
                state.poll_errors.append(error.code().name)

    tasks = [
        asyncio.ensure_future(follow(apis[index % CHANNELS], job_id))
        for index, job_id in enumerate(state.job_ids)
    ]
    tasks += [asyncio.ensure_future(poll(index)) for index in range(LONG_POLLS)]

    async def all_open() -> bool:
        return len(state.last_status) == STREAMS or bool(state.ended)

    try:
        await assert_eventually(all_open, timeout=40, interval=0.2)
        assert not state.ended, f"streams ended early: {sorted(state.ended.values())[:5]}"
        yield state, apis[0]
        assert not state.poll_errors, state.poll_errors[:5]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in [*job_channels, worker_channel]:
            await channel.close(None)


@pytest.mark.parametrize("topology", ["embedded", pytest.param("redis", marks=pytest.mark.redis)])
@pytest.mark.timeout(120)
async def test_every_stream_stays_open_until_its_terminal_snapshot_then_ends_ok(
    request: pytest.FixtureRequest, topology: str
) -> None:
    fixture = "embedded_alone" if topology == "embedded" else "on_shared_redis"
    deployment: Deployment = request.getfixturevalue(fixture)
    async with crowd(deployment) as (state, api):
        assert set(state.last_status.values()) == {QUEUED}
        await in_batches([api.cancel(job_id) for job_id in state.job_ids])

        async def all_ended() -> bool:
            return len(state.ended) == STREAMS

        await assert_eventually(all_ended, timeout=40, interval=0.2)
        assert set(state.ended.values()) == {"OK"}
        assert all(state.last_status[job_id] in TERMINAL for job_id in state.job_ids)


@pytest.mark.redis
@pytest.mark.timeout(120)
async def test_recovery_expires_a_lease_while_streams_are_open(
    on_shared_redis: Deployment, timings: Timings
) -> None:
    lease = float(on_shared_redis.settings["lease-timeout"])
    async with crowd(on_shared_redis) as (_, api):
        model = fresh_name("m")
        job = await api.submit(model)
        await api.claim_one(model)
        claimed_at = time.monotonic()

        async def requeued() -> bool:
            return (await api.get(job.id)).status == QUEUED

        await assert_eventually(requeued, timeout=lease + 10, interval=0.05)
        late = time.monotonic() - claimed_at - lease
        timings("lease recovery: requeued past the lease", late, "streams and long polls open")


@pytest.mark.redis
@pytest.mark.timeout(120)
async def test_redis_connections_do_not_grow_with_open_streams_and_long_polls(
    own_redis: RedisServer, on_own_redis: Deployment
) -> None:
    async with crowd(on_own_redis):
        clients = int(own_redis.info_field("clients", "connected_clients"))
    # two server processes; STREAMS + LONG_POLLS connections would be 2,200
    assert clients <= 2 * PER_PROCESS, f"{clients} Redis connections"
