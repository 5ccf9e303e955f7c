"""RedisStore on uvloop, the loop the servers run on (jobgate/_loop.py).

uvloop's transports raise RuntimeError on a write to a connection that is
already closed, where asyncio's drop the write and let the read fail. The
store must answer that as it answers any lost connection: StoreUnavailable
(gRPC UNAVAILABLE), never INTERNAL, and the next call works again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import pytest
import uvloop
from redis.asyncio import Redis

from store import StoreUnavailable
from store.errors import closed_transport
from store.model import JobSpec, StoreSettings, SubmitRequest
from store.redis_notify import Subscription
from store.redis_store import RedisStore, _translated
from tests.redis_server import RedisServer

T = TypeVar("T")

UVLOOP_CLOSED = "unable to perform operation on <TCPTransport closed=True reading=False 0x5561>"


def on_uvloop(body: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await body()

    return uvloop.run(main())


def request() -> SubmitRequest:
    return SubmitRequest("acme", JobSpec("llm-small", b"input"))


def close_idle_transports(store: RedisStore) -> int:
    """Close the transport under every idle pooled connection, as a peer's close would."""
    client = store._client
    assert isinstance(client, Redis)
    pool = client.connection_pool
    closed = 0
    for connection in pool._available_connections:
        if connection._writer is not None:
            connection._writer.transport.abort()
            closed += 1
    return closed


def test_a_write_to_a_closed_connection_on_uvloop_is_store_unavailable(
    own_redis: RedisServer, partition: str
) -> None:
    async def body() -> None:
        store = RedisStore(own_redis.url, StoreSettings(), partition=partition)
        await store.open()
        try:
            await store.submit(request())
            assert close_idle_transports(store) > 0
            with pytest.raises(StoreUnavailable) as raised:
                await store.submit(request())
            assert closed_transport(raised.value.__cause__ or raised.value)
        finally:
            await store.close()

    on_uvloop(body)


def test_the_call_after_a_closed_connection_on_uvloop_succeeds(
    own_redis: RedisServer, partition: str
) -> None:
    async def body() -> str:
        store = RedisStore(own_redis.url, StoreSettings(), partition=partition)
        await store.open()
        try:
            await store.submit(request())
            close_idle_transports(store)
            with pytest.raises(StoreUnavailable):
                await store.submit(request())
            return (await store.submit(request())).job.id
        finally:
            await store.close()

    assert on_uvloop(body)


def test_uvloops_closed_transport_error_is_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable), _translated("submit"):
        raise RuntimeError(UVLOOP_CLOSED)


def test_any_other_runtime_error_is_left_alone() -> None:
    with pytest.raises(RuntimeError, match="a bug"), _translated("submit"):
        raise RuntimeError("a bug")


class SwallowingPubSub:
    """A pub/sub whose reads answer a cancel with None, as redis-py's get_message can."""

    async def get_message(self, timeout: float) -> None:
        try:
            await asyncio.sleep(timeout)
        except asyncio.CancelledError:
            return None

    async def ping(self) -> None:
        return None


async def test_a_subscription_reader_ends_when_cancelled_even_if_the_read_swallows_it() -> None:
    subscription = Subscription(cast(Redis, None), ["jobgate:{p}:notify"], sharded=False)
    subscription.pubsub = SwallowingPubSub()
    reader = asyncio.ensure_future(subscription.read(lambda message: None))
    await asyncio.sleep(0)  # the reader is inside its first read
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(reader, timeout=5)
