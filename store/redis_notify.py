"""Cross-replica wake-ups: one pub/sub connection per RedisStore, local waiters.

Scripts PUBLISH short messages on the partition's channel ("r <model> <id>":
job <id> became claimable, topic "r <model>"; "q <model>": a ready queue
shrank; "j <id>": a job changed). The ids of "r" messages are handed to
`on_ready`, so the next claim declares them (a hint, store/lua/includes/
declared.lua). `Notifier` reads them on one task and sets the asyncio events of
the local `Listener`s interested in that message. A listener is level
triggered: clear it, read the state, then wait; a message that arrives
after the clear is never lost.

If the pub/sub connection breaks, every waiter fails at once with
StoreUnavailable (never a silent hang) and the notifier reconnects in the
background; after a reconnect every listener is woken once, since messages
may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError

from store.errors import StoreUnavailable

log = logging.getLogger(__name__)

# An idle subscription sends PING after this long and counts Redis as gone
# if nothing (not even the PONG) came back within the same time again: a
# hung Redis (SIGSTOP, network partition) fails waiters within ~1 s too.
_POLL_SECONDS = 0.5
_RECONNECT_SECONDS = 0.2
#: A listener of this topic hears every message (the partitioned store's
#: blocking events read: any transition may have appended an event).
ANY_MESSAGE = "*"


class Listener:
    """Waits for any message among `topics` (e.g. "r gpt-small", "j 01H...")."""

    def __init__(self, notifier: Notifier, topics: Iterable[str]) -> None:
        self._notifier = notifier
        self.topics: set[str] = set(topics)
        # The first topics are the listener's own (a message there is urgent);
        # later ones, added with `add`, only say that something nearby moved.
        self.own: set[str] = set(self.topics)
        self.event = asyncio.Event()
        self.own_event = asyncio.Event()
        self.waiting = False

    def add(self, topic: str) -> bool:
        """Listen to one more topic; True if it is new (messages before now were missed)."""
        if topic in self.topics:
            return False
        self.topics.add(topic)
        self._notifier._index(self, topic)
        return True

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

    async def wait(self, timeout: float) -> None:
        """Return on a message, on timeout or at close; raise if pub/sub is down."""
        self._notifier.check()
        self.waiting = True
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), timeout)
        finally:
            self.waiting = False
        self._notifier.check()


class Notifier:
    def __init__(self, client_factory: Callable[[], Awaitable[Redis]], channel: str) -> None:
        # Called on every (re)subscribe: on Cluster it finds the node that owns
        # the channel's slot now, so a failover or a slot move is followed.
        self._client_factory = client_factory
        self._channels = [channel]
        self._listeners: dict[str, set[Listener]] = {}
        self._task: asyncio.Task[None] | None = None
        self._error: str | None = "not started"
        self._closed = False
        self._current: Any = None  # the live PubSub, closed by close()
        # Called with (channel, model, job id) for every "r" message, listened to or not.
        self.on_ready: Callable[[str, str, str], None] = lambda channel, model, job_id: None

    def add_channel(self, channel: str) -> None:
        """Also hear `channel` (another partition's, sharing this connection); before start()."""
        self._channels.append(channel)

    @property
    def closed(self) -> bool:
        return self._closed

    def check(self) -> None:
        if self._error is not None and not self._closed:
            raise StoreUnavailable(f"store notifications are down: {self._error}")

    async def start(self) -> None:
        """Subscribe (raises StoreUnavailable if Redis is down) and start reading."""
        pubsub = await self._subscribe()
        self._error = None
        self._task = asyncio.create_task(self._run(pubsub), name="jobgate-redis-notify")

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._current is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._current.aclose()
            self._current = None
        self._wake_all()

    async def resubscribe(self, primary: tuple[str, int]) -> None:
        """Unless subscribed on `primary` already, drop the subscription (the primary moved).

        The reader sees the broken connection like any other, fails the
        waiters of the moment, subscribes again (on the new primary: the
        pool asks the sentinels) and wakes every listener once. A
        subscription the reader already re-made on `primary` (after the old
        one died) is kept: dropping it would fail its waiters for nothing.
        """
        connection = getattr(self._current, "connection", None)
        if connection is None:
            return
        if (getattr(connection, "host", None), getattr(connection, "port", None)) == primary:
            return
        with contextlib.suppress(RedisError, OSError):
            await connection.disconnect()

    @contextlib.contextmanager
    def listen(self, topics: Iterable[str]) -> Iterator[Listener]:
        listener = Listener(self, topics)
        for topic in listener.topics:
            self._index(listener, topic)
        try:
            yield listener
        finally:
            for topic in listener.topics:
                waiting = self._listeners.get(topic)
                if waiting is not None:
                    waiting.discard(listener)
                    if not waiting:
                        del self._listeners[topic]

    def listeners(self, topic: str) -> int:
        """Listeners of `topic` (waiting or not), in O(1)."""
        return len(self._listeners.get(topic, ()))

    def waiters(self, topic: str) -> int:
        """Listeners of `topic` blocked in wait() right now."""
        return sum(listener.waiting for listener in self._listeners.get(topic, ()))

    def _index(self, listener: Listener, topic: str) -> None:
        self._listeners.setdefault(topic, set()).add(listener)

    def _wake_all(self) -> None:
        for waiting in self._listeners.values():
            for listener in waiting:
                listener.event.set()
                listener.own_event.set()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") != "message":
            return
        data = message.get("data")
        if not isinstance(data, bytes):
            return
        topic = data.decode(errors="replace")
        kind, _, rest = topic.partition(" ")
        model, _, job_id = rest.partition(" ")
        if kind == "r" and job_id:
            # "r <model> <id>"; a bare "r <model>" (an older server's scripts,
            # mid-upgrade) still wakes its listeners
            topic = f"r {model}"
            self.on_ready(_channel_name(message.get("channel")), model, job_id)
        for listener in (*self._listeners.get(topic, ()), *self._listeners.get(ANY_MESSAGE, ())):
            listener.event.set()
            if topic in listener.own or ANY_MESSAGE in listener.own:
                listener.own_event.set()

    async def _subscribe(self) -> Any:
        try:
            client = await self._client_factory()
        except (RedisError, RedisClusterException, OSError) as error:
            raise StoreUnavailable(f"cannot subscribe to notifications: {error}") from error
        # Subscribe confirmations come through (and _dispatch skips them): ignored
        # ones read as None, which the keep-alive below takes for silence.
        pubsub = client.pubsub(ignore_subscribe_messages=False)
        self._current = pubsub
        try:
            await pubsub.subscribe(*self._channels)
        except (RedisError, OSError) as error:
            self._current = None
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
            raise StoreUnavailable(f"cannot subscribe to notifications: {error}") from error
        return pubsub

    async def _run(self, pubsub: Any) -> None:
        awaiting_pong = False
        while not self._closed:
            try:
                message = await pubsub.get_message(timeout=_POLL_SECONDS)
                if message is None:
                    if awaiting_pong:
                        raise RedisConnectionError("no answer to PING on the subscription")
                    await pubsub.ping()
                awaiting_pong = message is None
            except (RedisConnectionError, OSError, RedisError) as error:
                self._error = str(error) or type(error).__name__
                log.warning("redis notifications lost (%s); reconnecting", self._error)
                self._wake_all()
                self._current = None
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()
                pubsub = await self._reconnect()
                awaiting_pong = False
                continue
            if message is not None:
                self._dispatch(message)

    async def _reconnect(self) -> Any:
        while True:
            await asyncio.sleep(_RECONNECT_SECONDS)
            try:
                pubsub = await self._subscribe()
            except StoreUnavailable:
                continue
            self._error = None
            log.info("redis notifications restored")
            self._wake_all()  # messages may have been missed while down
            return pubsub


def _channel_name(channel: object) -> str:
    return channel.decode() if isinstance(channel, bytes) else str(channel)
