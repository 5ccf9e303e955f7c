"""The audit trail of a deployment over several partitions: their streams merged.

Each partition keeps its own stream (store/keys.py `events`). A reader
over N partitions holds one position per partition in its cursor,
"<p0>,<p1>,...", and each merged event's id is the cursor after it, so
reading on from any event misses and repeats nothing, even when a
partition appends an event older than ones already read. One partition
needs none of this: its stream ids are the cursor (RedisEngine.events).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta

from store.errors import InvalidRequest
from store.model import JobEvent
from store.redis.connection import Connection
from store.redis.notify import ANY_MESSAGE, Listener
from store.redis.partition import Partition

# Separates the partitions' stream positions in an event cursor.
CURSOR_SEPARATOR = ","
#: How often a blocking events read re-reads on a store that does not hear changes.
UNHEARD_EVENTS_POLL = 0.5

Listen = Callable[[Iterable[str]], AbstractContextManager[Listener]]


class MergedEvents:
    """events() and newest_event_id() over every partition's stream."""

    def __init__(
        self,
        connection: Connection,
        parts: Sequence[Partition],
        listen: Listen,
        recheck: Callable[[], float],
    ) -> None:
        self.connection = connection
        self.parts = parts
        self._listen = listen
        self._recheck = recheck
        self.waiting = 0  # blocking reads waiting for a notification (tests, debugging)

    def cursor(self, after: str) -> list[str]:
        """One stream position per partition; a plain stream id applies to every one."""
        positions = after.split(CURSOR_SEPARATOR)
        if len(positions) == 1:
            return positions * len(self.parts)
        if len(positions) != len(self.parts):
            raise InvalidRequest(
                "after", f"an event cursor of {len(self.parts)} partitions, got {after!r}"
            )
        return positions

    async def events(self, after: str, count: int, block: timedelta | None) -> list[JobEvent]:
        """The partitions' streams merged in stream-id (time) order."""
        cursor = self.cursor(after)
        if block is None:
            return await self._read(cursor, count)
        if not self.connection.notifier.hears(ANY_MESSAGE):
            return await self._poll(cursor, count, block)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block.total_seconds()
        with self._listen([ANY_MESSAGE]) as listener:
            while True:
                listener.clear()  # before the read: an event after it wakes us
                page = await self._read(cursor, count)
                remaining = deadline - loop.time()
                if page or remaining <= 0 or self.connection.closed:
                    return page
                self.waiting += 1
                try:
                    # the re-check also bounds an event whose script published nothing
                    await listener.wait(min(remaining, self._recheck()))
                finally:
                    self.waiting -= 1

    async def _poll(self, cursor: list[str], count: int, block: timedelta) -> list[JobEvent]:
        """events(block=...) on a store that does not hear the changes channel.

        Nothing would wake a listener, so the read is made again every
        UNHEARD_EVENTS_POLL until the block ends: the worker-server's audit
        log (it may lead recovery) reads this way, with its own 0.5 s block.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block.total_seconds()
        while True:
            page = await self._read(cursor, count)
            remaining = deadline - loop.time()
            if page or remaining <= 0 or self.connection.closed:
                return page
            await asyncio.sleep(min(remaining, UNHEARD_EVENTS_POLL))

    async def _read(self, cursor: list[str], count: int) -> list[JobEvent]:
        pages = await asyncio.gather(
            *(
                part.reads.events(after=at, count=count)
                for part, at in zip(self.parts, cursor, strict=True)
            )
        )
        merged = heapq.merge(*(_in_stream_order(index, page) for index, page in enumerate(pages)))
        positions = list(cursor)
        events: list[JobEvent] = []
        for _, index, event in itertools.islice(merged, count):
            positions[index] = event.id
            events.append(dataclasses.replace(event, id=CURSOR_SEPARATOR.join(positions)))
        return events

    async def newest_event_id(self) -> str:
        newest = await asyncio.gather(*(part.reads.newest_event_id() for part in self.parts))
        if all(position == "0" for position in newest):
            return "0"
        return CURSOR_SEPARATOR.join(newest)


def _in_stream_order(
    index: int, page: list[JobEvent]
) -> Iterator[tuple[tuple[int, int], int, JobEvent]]:
    for event in page:
        yield _stream_order(event.id), index, event


def _stream_order(stream_id: str) -> tuple[int, int]:
    millis, _, sequence = stream_id.partition("-")
    return int(millis), int(sequence or 0)
