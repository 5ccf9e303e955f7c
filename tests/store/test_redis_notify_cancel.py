"""A notification reader ends when its task is cancelled, whatever redis-py does with the cancel.

redis-py's get_message can answer a cancel of the task reading it like its
own read timeout and return None; seen on uvloop, where every server then
hung at exit (store.close() waited for the reader forever).
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from redis.asyncio import Redis

from store.redis.notify import Subscription


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
