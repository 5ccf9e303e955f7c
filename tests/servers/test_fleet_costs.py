"""What the fleet features cost Redis, counted on a private redis-server.

Counts, not timings: the registry's flush interval runs on a fake clock, so
ten seconds of calls take only as long as the calls themselves; the
StreamIsActive window is a measurement (commands counted over it), not a
synchronisation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from redis import Redis as SyncRedis

from gateway_server.demand import RECHECK, DemandWatches
from gateway_server.scaler import ExternalScaler
from jobgate.keda import externalscaler_pb2 as keda
from jobgate.keda import externalscaler_pb2_grpc
from jobgate.v1 import worker_service_pb2
from serving.settings import ServerSettings
from serving.shared import Serving
from store.model import WorkerSighting
from store.redis import RedisStore
from tests.fake_clock import FakeClock
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness
from worker_server.registry import FLUSH_INTERVAL, WorkerRegistry

pytestmark = pytest.mark.redis

WORKERS = 200
SECONDS = 10
CALLS_PER_SECOND = 4  # each worker's ClaimNext calls per (fake) second
REGISTRY_COMMANDS = ("zadd", "hset", "zrem", "hdel")


class CountingStore(RedisStore):
    """A RedisStore counting how many registry entries each worker got written."""

    def __init__(self, url: str, partition: str) -> None:
        super().__init__(url, ServerSettings().store_settings(), partition)
        self.written: dict[str, int] = {}

    async def record_workers(self, seen: Sequence[WorkerSighting]) -> None:
        for sighting in seen:
            self.written[sighting.worker_id] = self.written.get(sighting.worker_id, 0) + 1
        await super().record_workers(seen)


def command_calls(server: RedisServer) -> dict[str, int]:
    """Calls per command so far (INFO commandstats; commands run by scripts included)."""
    client = SyncRedis(port=server.port)
    try:
        stats: dict[str, Any] = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(entry["calls"]) for name, entry in stats.items()}


def delta(before: dict[str, int], after: dict[str, int], names: Sequence[str]) -> int:
    return sum(after.get(name, 0) - before.get(name, 0) for name in names)


@pytest.fixture
async def counted(
    make_harness: MakeHarness, own_redis: RedisServer, partition: str
) -> AsyncIterator[tuple[Harness, CountingStore, FakeClock, WorkerRegistry]]:
    store = CountingStore(own_redis.url, partition)
    clock = FakeClock()
    registry = WorkerRegistry(store, clock=clock, sleep=clock.sleep)
    harness = await make_harness(store=store, registry=registry)
    yield harness, store, clock, registry
    await registry.close()


async def test_200_workers_claiming_for_10_s_cost_at_most_11_registry_writes_each(
    counted: tuple[Harness, CountingStore, FakeClock, WorkerRegistry], own_redis: RedisServer
) -> None:
    harness, store, clock, registry = counted
    requests = [
        worker_service_pb2.ClaimNextRequest(worker_id=f"gpu-{n:03d}", models=["m"])
        for n in range(WORKERS)
    ]
    before = command_calls(own_redis)
    for _ in range(SECONDS * CALLS_PER_SECOND):
        await asyncio.gather(*(harness.worker.ClaimNext(r, timeout=30) for r in requests))
        clock.advance(FLUSH_INTERVAL / CALLS_PER_SECOND)

    async def written() -> bool:  # the last interval's calls too
        return registry.pending == 0

    await assert_eventually(written, message="the last calls were never written")
    after = command_calls(own_redis)
    entries = sum(store.written.values())
    commands = delta(before, after, REGISTRY_COMMANDS)
    print(
        f"\nregistry: {WORKERS * SECONDS * CALLS_PER_SECOND} ClaimNext calls, {registry.flushes}"
        f" flushes, {entries} entries written, {commands} write commands"
    )
    assert len(store.written) == WORKERS
    assert max(store.written.values()) <= SECONDS + 1
    assert entries <= WORKERS * (SECONDS + 1)
    assert commands <= WORKERS * (SECONDS + 1)


# -- StreamIsActive ------------------------------------------------------------------

STREAMS = 500
TRIGGERS = 5
WINDOW = 5.0  # seconds: "at most one store read per trigger per 5 s"


@pytest.fixture
async def gateway(
    make_harness: MakeHarness, own_redis: RedisServer, partition: str
) -> tuple[Harness, DemandWatches]:
    store = RedisStore(own_redis.url, ServerSettings().store_settings(), partition)
    built: list[ExternalScaler] = []

    def build(serving: Serving) -> ExternalScaler:
        built.append(ExternalScaler(serving))
        return built[0]

    harness = await make_harness(store=store, scaler=build)
    return harness, built[0].watches


async def redis_calls_over(server: RedisServer, seconds: float) -> int:
    before = command_calls(server)
    await asyncio.sleep(seconds)  # the measurement window (nothing waits on it)
    after = command_calls(server)
    names = set(before) | set(after)
    return delta(before, after, sorted(names - {"info"}))


async def test_500_open_streams_cost_one_read_per_trigger_per_5_s_at_most(
    gateway: tuple[Harness, DemandWatches], own_redis: RedisServer
) -> None:
    harness, watches = gateway
    baseline = await redis_calls_over(own_redis, WINDOW)
    stub = externalscaler_pb2_grpc.ExternalScalerStub(harness.job_channel)
    streams = [
        stub.StreamIsActive(
            keda.ScaledObjectRef(scalerMetadata={"model": f"m{n % TRIGGERS}"}), timeout=60
        )
        for n in range(STREAMS)
    ]
    for stream in streams:
        first = await stream.read()
        assert isinstance(first, keda.IsActiveResponse) and not first.result
    assert len(watches) == TRIGGERS
    reads_before = watches.reads
    with_streams = await redis_calls_over(own_redis, WINDOW)
    reads = watches.reads - reads_before
    # one demand read is one pipeline of 3 ZCARD + 1 HGET on one partition
    print(f"\nstreams: baseline {baseline}, with {STREAMS} streams {with_streams} commands, "
          f"{reads} watcher reads in {WINDOW:g} s (recheck {RECHECK:g} s)")  # fmt: skip
    assert reads <= TRIGGERS
    assert with_streams - baseline <= TRIGGERS * 4
    for stream in streams:
        stream.cancel()

    async def all_gone() -> bool:
        return len(watches) == 0

    await assert_eventually(all_gone, timeout=10)
