"""In-process wake-ups by topic, routed like RedisEngine's messages.

Topics: "j <id>" (a job changed), "q <model>" (its queue moved),
"r <model>" (a job became claimable) and EVERY_CHANGE (any of them). A
`LocalListener` is level triggered like the Redis one (store/poll.py
`Listener`): clear it, read the state, then wait; a wake-up after the clear
is never lost. Its first topics are its
own (a wake-up there is urgent); topics added later only say that something
nearby moved, which `settle` lets a watcher take its time over.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from store.poll import EVERY_CHANGE


class LocalListener:
    def __init__(self, waiters: Waiters, topics: Iterable[str]) -> None:
        self._waiters = waiters
        self.own = set(topics)
        self.topics: set[str] = set()
        self.event = asyncio.Event()
        self.own_event = asyncio.Event()

    def add(self, topic: str) -> bool:
        if topic in self.topics:
            return False
        self.topics.add(topic)
        self._waiters.register(self, topic)
        return True

    def clear(self) -> None:
        self.event.clear()
        self.own_event.clear()

    def wake(self, topic: str) -> None:
        self.event.set()
        if topic in self.own:
            self.own_event.set()

    async def wait(self, timeout: float) -> None:
        # asyncio.timeout, not wait_for: no inner task, so the waiter runs in the
        # loop pass after its wake-up, before the journal's flusher seals that
        # transition's batch, and its claim joins the same commit (durable.py).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.event.wait()

    async def settle(self, seconds: float) -> None:
        if self.event.is_set() and not self.own_event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.own_event.wait(), seconds)


class Waiters:
    """The listeners of each topic; a wake-up of a topic sets every listener of it."""

    def __init__(self) -> None:
        self._by_topic: dict[str, set[LocalListener]] = {}

    @contextlib.contextmanager
    def listen(self, topics: Iterable[str]) -> Iterator[LocalListener]:
        own = list(topics)
        listener = LocalListener(self, own)
        for topic in own:
            listener.add(topic)
        try:
            yield listener
        finally:
            for topic in listener.topics:
                listening = self._by_topic.get(topic)
                if listening is not None:
                    listening.discard(listener)
                    if not listening:
                        del self._by_topic[topic]

    def register(self, listener: LocalListener, topic: str) -> None:
        self._by_topic.setdefault(topic, set()).add(listener)

    def count(self, topic: str) -> int:
        return len(self._by_topic.get(topic, ()))

    def wake(self, topics: Iterable[str]) -> None:
        woken = False
        for topic in topics:
            woken = True
            for listener in self._by_topic.get(topic, ()):
                listener.wake(topic)
        if woken:  # EVERY_CHANGE listeners hear any wake-up
            for listener in self._by_topic.get(EVERY_CHANGE, ()):
                listener.wake(EVERY_CHANGE)

    def wake_all(self) -> None:
        for topic, listening in list(self._by_topic.items()):
            for listener in listening:
                listener.wake(topic)
