"""Replication states a failover passes through answer StoreUnavailable, never INTERNAL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from store import Store, StoreSettings, StoreUnavailable, open_store
from store.model import JobSpec, SubmitRequest
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis


@pytest.fixture
async def own_store(own_redis: RedisServer, partition: str) -> AsyncIterator[Store]:
    store = open_store(own_redis.url, StoreSettings(), partition=partition)
    await store.open()
    yield store
    await store.close()


async def test_a_primary_without_its_min_replicas_is_store_unavailable(
    own_redis: RedisServer, own_store: Store
) -> None:
    # min-replicas-to-write 1 and no replica: NOREPLICAS, as on a primary cut
    # off from its replicas or promoted with none left.
    own_redis.command("CONFIG", "SET", "min-replicas-to-write", "1")
    request = SubmitRequest(tenant="acme", work=JobSpec(model="m", payload=b"x"))
    with pytest.raises(StoreUnavailable, match="NOREPLICAS"):
        await own_store.submit(request)


async def test_a_blocked_read_ended_by_a_demotion_is_store_unavailable(
    own_redis: RedisServer, own_store: Store
) -> None:
    # Redis unblocks every blocked client when it turns replica (UNBLOCKED).
    # The partition is fresh, so its event stream is empty and XREAD blocks.
    reading = asyncio.create_task(own_store.events(after="0", block=timedelta(seconds=30)))

    async def blocked() -> bool:
        return own_redis.info_field("clients", "blocked_clients") != "0"

    await assert_eventually(blocked, timeout=10, message="the XREAD never blocked")
    own_redis.command("REPLICAOF", "127.0.0.1", str(free_port()))
    try:
        with pytest.raises(StoreUnavailable, match="UNBLOCKED"):
            await asyncio.wait_for(reading, 10)
    finally:
        own_redis.command("REPLICAOF", "NO", "ONE")
