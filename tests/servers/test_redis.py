"""The servers on RedisStore (real redis-server): replicas share work, a dead store is loud."""

from __future__ import annotations

import asyncio
import io
import time

import grpc
import pytest
from redis.asyncio import Redis

from jobgate.cli._servers import process as server_process
from jobgate.v1 import job_pb2, job_service_pb2
from serving.recovery import StoreProbe
from serving.runner import open_configured_store
from serving.settings import Address, ServerSettings
from store import StoreSettings, open_store
from store.keys import Keys
from store.redis import RedisStore
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, fails, next_job, rest_of
from tests.timings import Timings

pytestmark = pytest.mark.redis


async def _replica(
    make_harness: MakeHarness, url: str, partition: str, partitions: int = 1
) -> Harness:
    store = open_store(url, StoreSettings(), partition=partition, partitions=partitions)
    return await make_harness(settings=ServerSettings(redis_url=url), store=store)


@pytest.fixture(params=[1, 3])
def partitions(request: pytest.FixtureRequest) -> int:
    """--redis-partitions of the replicas: one, or three (the partitioned store)."""
    return int(request.param)


async def test_the_runner_builds_the_store_of_redis_partitions(
    redis_server: RedisServer, partition: str
) -> None:
    settings = ServerSettings(
        redis_url=redis_server.url, redis_partition=partition, redis_partitions=3
    )
    store = await open_configured_store(settings)
    try:
        assert isinstance(store, RedisStore)
        assert [part.keys.partition for part in store.engine.parts] == [
            f"{partition}/{index}" for index in range(3)
        ]
    finally:
        await store.close()


async def test_submit_on_one_replica_wakes_a_claim_on_another(
    make_harness: MakeHarness,
    redis_server: RedisServer,
    partition: str,
    partitions: int,
    timings: Timings,
) -> None:
    first = await _replica(make_harness, redis_server.url, partition, partitions)
    second = await _replica(make_harness, redis_server.url, partition, partitions)
    waiting = asyncio.create_task(second.claim(wait=20))

    async def polling() -> bool:
        return second.serving.lifecycle.in_flight == 1

    await assert_eventually(polling)
    job = await first.submit()
    started = time.monotonic()
    claimed = await waiting
    woken = time.monotonic() - started
    timings(
        "wake-up: a waiting claim answers a new job", woken, f"servers, {partitions} partitions"
    )
    assert [item.job.id for item in claimed] == [job.id]


async def test_stream_on_one_replica_sees_a_result_set_on_another(
    make_harness: MakeHarness, redis_server: RedisServer, partition: str, partitions: int
) -> None:
    first = await _replica(make_harness, redis_server.url, partition, partitions)
    second = await _replica(make_harness, redis_server.url, partition, partitions)
    job = await first.submit()
    stream = first.job.StreamStatus(job_service_pb2.StreamStatusRequest(job_id=job.id))
    assert (await next_job(stream)).status == job_pb2.JOB_STATUS_QUEUED
    [claimed] = await second.claim()
    await second.complete(claimed)
    assert (await rest_of(stream))[-1].status == job_pb2.JOB_STATUS_COMPLETED


async def test_stream_on_one_replica_refreshes_the_queue_position_after_a_claim_on_another(
    make_harness: MakeHarness, redis_server: RedisServer, partition: str, partitions: int
) -> None:
    first = await _replica(make_harness, redis_server.url, partition, partitions)
    second = await _replica(make_harness, redis_server.url, partition, partitions)
    await first.submit()
    behind = await first.submit()
    stream = first.job.StreamStatus(job_service_pb2.StreamStatusRequest(job_id=behind.id))
    assert (await next_job(stream)).queue_position == 1
    await second.claim()
    moved_up = await next_job(stream)
    assert moved_up.HasField("queue_position") and moved_up.queue_position == 0
    stream.cancel()


async def test_store_down_is_unavailable_and_recovers(
    make_harness: MakeHarness, own_redis: RedisServer, partition: str, timings: Timings
) -> None:
    harness = await _replica(make_harness, own_redis.url, partition)
    job = await harness.submit()
    probe = StoreProbe(harness.serving.store, harness.metrics, harness.serving.health)
    own_redis.kill()
    started = time.monotonic()
    failure = await fails(harness.job.Get(job_service_pb2.GetRequest(job_id=job.id)))
    assert (failure.code, failure.reasons) == (grpc.StatusCode.UNAVAILABLE, ["STORE_UNAVAILABLE"])
    timings("store down: call fails", time.monotonic() - started, "servers, killed, Get")
    assert (await fails(harness.claim(wait=1))).code is grpc.StatusCode.UNAVAILABLE
    await probe.step()
    assert await harness.value("jobgate_store_up") == 0
    own_redis.start()

    async def back() -> bool:
        await probe.step()
        return probe.up is True

    await assert_eventually(back, timeout=10)
    got = await harness.job.Get(job_service_pb2.GetRequest(job_id=job.id))
    assert got.job.id == job.id


async def test_queue_depth_is_read_from_redis_at_scrape(
    make_harness: MakeHarness, redis_server: RedisServer, partition: str
) -> None:
    harness = await _replica(make_harness, redis_server.url, partition)
    for _ in range(3):
        await harness.submit("depth")
    await harness.claim(["depth"])
    labels = {"model": "depth", "priority": "batch"}
    assert await harness.value("jobgate_queue_depth", labels) == 2
    assert await harness.value("jobgate_jobs_in_flight", {"model": "depth"}) == 1


@pytest.mark.parametrize(
    ("command", "hears_changes"), [("worker-server", False), ("gateway", True), ("serve", True)]
)
async def test_a_server_subscribes_to_the_channels_its_calls_wait_for(
    redis_server: RedisServer, partition: str, command: str, hears_changes: bool
) -> None:
    # the worker-server only claims: it never reads the "j"/"q" change messages
    loopback = Address("127.0.0.1", 0)
    settings = ServerSettings(
        listen=loopback,
        worker_listen=loopback,
        redis_url=redis_server.url,
        redis_partition=partition,
    )
    process = server_process(command, settings, out=io.StringIO(), install_signals=False)
    running = asyncio.create_task(process.run())
    client = Redis.from_url(redis_server.url)
    try:
        await asyncio.wait_for(process.started.wait(), 5)
        keys = Keys(partition)
        reply = dict(await client.pubsub_numsub(keys.notify, keys.changes))
        assert reply == {keys.notify.encode(): 1, keys.changes.encode(): int(hears_changes)}
    finally:
        await client.aclose()
        process.request_stop()
        assert await asyncio.wait_for(running, 15) == 0
