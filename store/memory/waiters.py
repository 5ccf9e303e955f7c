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

from store.poll import EVERY_CHANGE, TopicListener, unindex


class LocalListener(TopicListener):
    def __init__(self, waiters: Waiters, topics: Iterable[str]) -> None:
        super().__init__(topics)
        self._waiters = waiters

    def _listen(self, topic: str) -> None:
        self._waiters.register(self, topic)

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


class Waiters:
    """The listeners of each topic; a wake-up of a topic sets every listener of it."""

    def __init__(self) -> None:
        self._by_topic: dict[str, set[LocalListener]] = {}

    @contextlib.contextmanager
    def listen(self, topics: Iterable[str]) -> Iterator[LocalListener]:
        listener = LocalListener(self, topics)
        for topic in listener.topics:
            self.register(listener, topic)
        try:
            yield listener
        finally:
            unindex(self._by_topic, listener)

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
