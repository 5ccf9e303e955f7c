"""One StreamStatus per job and credential, shared by every page watching it.

A job page subscribes to a `Feed`; the first subscriber of a (credential,
job) opens the StreamStatus call (through `JobClient.watch`, which reopens a
broken stream), later ones join it and get its latest snapshot at once. So
200 open pages of 2 jobs hold 2 calls, not 200. Feeds are keyed by the token
too: a person never reads a stream opened with someone else's rights.

Subscribers read the latest snapshot, not every one: a slow browser skips
intermediate snapshots instead of growing a queue. The call ends when the
job is terminal (the stream closes), when it fails (NOT_FOUND, ...: the
error goes to the subscribers) or when the last subscriber leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from jobgate.client import JobClient
from jobgate.errors import JobgateError
from jobgate.v1 import job_pb2

log = logging.getLogger("jobgate.console")
FeedKey = tuple[str | None, str]  # (token, job_id)


@dataclass(frozen=True)
class Update:
    """What a subscriber receives: a snapshot, or the error that ended the feed."""

    job: job_pb2.Job | None = None
    error: JobgateError | None = None


class Feed:
    """The shared stream of one job for one credential."""

    def __init__(self, key: FeedKey, client: JobClient, on_idle: Callable[[Feed], None]) -> None:
        self.key = key
        self._client = client
        self._on_idle = on_idle
        self._changed = asyncio.Condition()
        self._latest: job_pb2.Job | None = None
        self._version = 0
        self._error: JobgateError | None = None
        self.finished = False
        self.subscribers = 0
        self._task = asyncio.create_task(self._run(), name=f"console-feed-{key[1]}")

    async def _run(self) -> None:
        try:
            async for job in self._client.watch(self.key[1]):
                await self._publish(job)
        except JobgateError as error:
            self._error = error
        except Exception:
            # Not the gateway's answer but a fault here: the pages just end.
            log.exception("status feed of %s failed", self.key[1])
        finally:
            self.finished = True
            # Wake every subscriber; shielded so a cancel (last one left) still does.
            await asyncio.shield(self._publish(None))

    async def _publish(self, job: job_pb2.Job | None) -> None:
        async with self._changed:
            if job is not None:
                self._latest = job
                self._version += 1
            self._changed.notify_all()

    def _newer(self, seen: int) -> bool:
        return self._version > seen or self.finished

    async def updates(self) -> AsyncGenerator[Update, None]:
        """The latest snapshot now (if any), then each newer one, then the end or error."""
        self.subscribers += 1
        seen = 0
        try:
            while True:
                async with self._changed:
                    await self._changed.wait_for(functools.partial(self._newer, seen))
                    latest, version, finished = self._latest, self._version, self.finished
                if version > seen and latest is not None:
                    seen = version
                    yield Update(job=latest)
                    continue
                if finished:
                    if self._error is not None:
                        yield Update(error=self._error)
                    return
        finally:
            self.subscribers -= 1
            if self.subscribers == 0:
                self._on_idle(self)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class StatusHub:
    """The console's feeds: `subscribe` shares one per (token, job)."""

    def __init__(self, client_for: Callable[[str | None], JobClient]) -> None:
        self._client_for = client_for
        self._feeds: dict[FeedKey, Feed] = {}
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def open_feeds(self) -> int:
        return len(self._feeds)

    def subscribe(self, token: str | None, job_id: str) -> AsyncGenerator[Update, None]:
        key = (token, job_id)
        feed = self._feeds.get(key)
        if feed is None or feed.finished:
            # A finished feed is not joined: a new page gets a fresh current snapshot.
            feed = Feed(key, self._client_for(token), self._idle)
            self._feeds[key] = feed
        return feed.updates()

    def _idle(self, feed: Feed) -> None:
        if self._feeds.get(feed.key) is feed:
            del self._feeds[feed.key]
        task = asyncio.get_running_loop().create_task(feed.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """End every feed (their subscribers see the end)."""
        feeds = list(self._feeds.values())
        self._feeds.clear()
        for feed in feeds:
            await feed.close()
        if self._closing:
            await asyncio.gather(*self._closing)
