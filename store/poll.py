"""Waiting for a change: the listener every engine gives, and the claim's long poll.

A `Listener` (RedisEngine: store/redis/notify.py; LocalEngine:
store/memory/waiters.py) is level triggered: clear it, read the state, then
wait; a wake-up that arrives after the clear is never lost. The claim's long
poll is written once here, over any engine's listener.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol, TypeVar

T = TypeVar("T")

#: A listener of this topic hears every wake-up (any job's change), on every engine.
EVERY_CHANGE = "*"


class Listener(Protocol):
    """Waits for any wake-up among its topics (e.g. "r gpt-small", "j 01H...")."""

    def add(self, topic: str) -> bool:
        """Listen to one more topic; True if it is new (wake-ups before now were missed)."""
        ...

    def clear(self) -> None: ...

    async def wait(self, timeout: float) -> None:
        """Return on a wake-up, on timeout or at close; StoreUnavailable if wake-ups are down."""
        ...

    async def settle(self, seconds: float) -> None:
        """After a wake-up by an added topic only, wait up to `seconds` for one of its own."""
        ...


async def long_poll(
    listen: contextlib.AbstractContextManager[Listener],
    claim_now: Callable[[], Awaitable[list[T]]],
    wait: timedelta,
    *,
    closed: Callable[[], bool],
    reads: contextlib.AbstractAsyncContextManager[object],
    recheck: Callable[[], float],
) -> list[T]:
    """What `claim_now` claims, trying again on each wake-up of `listen` until `wait` ends.

    Listening starts before the first try, so a job made ready while that
    try runs still wakes the wait. A wait re-checks after `recheck()`
    seconds at most (a notification may be lost), raises StoreUnavailable
    when wake-ups are down, and ends at close. A woken re-try takes one of
    `reads`, so a burst of wake-ups does not empty a connection pool.
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
            await listener.wait(min(remaining, recheck()))
            if closed():
                return []
            async with reads:
                listener.clear()  # before the read: a wake-up after it is kept
                claimed = await claim_now()
