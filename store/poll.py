"""Waiting for a change: the listener every engine gives, and the claim's long poll.

A `Listener` (RedisEngine: store/redis/notify.py; LocalEngine:
store/memory/waiters.py) is level triggered: clear it, read the state, then
wait; a wake-up that arrives after the clear is never lost. The claim's long
poll is written once here, over any engine's listener.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, Protocol, TypeVar

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


class TopicListener:
    """What every engine's `Listener` keeps: its topics, the first ones its own, two events.

    A wake-up of any topic sets `event`; one of an own topic also sets
    `own_event`. The engine routes wake-ups (`_listen`) and waits (`wait`).
    """

    def __init__(self, topics: Iterable[str]) -> None:
        self.topics: set[str] = set(topics)
        # The first topics are the listener's own (a wake-up there is urgent);
        # later ones, added with `add`, only say that something nearby moved.
        self.own: set[str] = set(self.topics)
        self.event = asyncio.Event()
        self.own_event = asyncio.Event()

    def add(self, topic: str) -> bool:
        """Listen to one more topic; True if it is new (wake-ups before now were missed)."""
        if topic in self.topics:
            return False
        self._listen(topic)
        self.topics.add(topic)
        return True

    def _listen(self, topic: str) -> None:
        """Route the wake-ups of `topic` to this listener from now on."""
        raise NotImplementedError

    def clear(self) -> None:
        self.event.clear()
        self.own_event.clear()

    async def settle(self, seconds: float) -> None:
        """After a wake-up by a later topic only, wait up to `seconds` for an own one.

        A queue that moves many times a second then costs each watcher one
        re-read per `seconds`, not one per move; its own change is never delayed.
        """
        if self.event.is_set() and not self.own_event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.own_event.wait(), seconds)


L = TypeVar("L", bound=TopicListener)


def unindex(by_topic: dict[str, set[L]], listener: L) -> None:
    """Drop a leaving listener from the listeners of each of its topics (and empty entries)."""
    for topic in listener.topics:
        listening = by_topic.get(topic)
        if listening is not None:
            listening.discard(listener)
            if not listening:
                del by_topic[topic]


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background task (if any) and wait until it has ended.

    Its cancellation ends here: the caller is closing, not being cancelled.
    """
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


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
