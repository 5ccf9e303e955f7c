"""The long poll a claim waits in, on one RedisStore or on all partitions.

RedisStore.claim and PartitionedRedisStore.claim differ only in how they
claim (one partition's scripts, or a plan over every partition) and whose
notifier, read slots and close flag they use; the waiting is this loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from store.errors import FailureHook, reporting
from store.redis_notify import Listener

T = TypeVar("T")


async def long_poll(
    listen: contextlib.AbstractContextManager[Listener],
    claim_now: Callable[[], Awaitable[list[T]]],
    wait: timedelta,
    *,
    closed: Callable[[], bool],
    reads: asyncio.Semaphore,
    on_failure: FailureHook,
    recheck: Callable[[], float],
) -> list[T]:
    """What `claim_now` claims, trying again on each wake-up of `listen` until `wait` ends.

    Listening starts before the first try, so a job made ready while that
    try runs still wakes the wait. A wait re-checks after `recheck()`
    seconds at most (a notification may be lost), raises StoreUnavailable
    when pub/sub is down (reported to `on_failure` as "claim"), and ends at
    close. A woken re-try takes one of `reads`, so a burst of wake-ups does
    not empty the connection pool.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait.total_seconds()
    with listen as listener:
        listener.clear()
        claimed = await claim_now()
        while True:
            remaining = deadline - loop.time()
            if claimed or remaining <= 0 or closed():
                return claimed
            with reporting(on_failure, "claim"):
                await listener.wait(min(remaining, recheck()))
            if closed():
                return []
            async with reads:
                listener.clear()  # before the read: a wake-up after it is kept
                claimed = await claim_now()
