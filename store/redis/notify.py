"""Cross-replica wake-ups: pub/sub subscriptions per RedisStore, local waiters.

Scripts publish short messages on two channels per partition, split by
audience: on the ready channel "r <model> <id>" (job <id> became claimable,
topic "r <model>": claims wait for it); on the changes channel "q <model>"
(a ready queue shrank) and "j <id>" (a job changed: watchers and event
follows wait for these). A store subscribes to the channels its server
needs (RedisStore's hear_ready / hear_changes): the worker-server only
claims, so it never reads the changes. Listening to a topic whose channel
is not subscribed raises UnheardTopic (it would never wake: a programming
error, not a hang). The ids of "r" messages are handed to
`on_ready`, so the next claim declares them (a hint, store/lua/includes/
declared.lua). `Notifier` reads them and sets the asyncio events of the
local `Listener`s interested in that message. A listener is level
triggered: clear it, read the state, then wait; a message that arrives
after the clear is never lost.

Claims listen with `wake_one`: an "r <model> <id>" message makes one job
claimable, so it wakes only the claim listener of "r <model>" that has
waited longest (with eight claims waiting, waking all ran eight claim
scripts per job and seven found nothing). It is marked not-waiting at once,
so the next message wakes another. If no claim listener of the topic is
waiting (all are between clear() and wait(): mid-read), every one is set,
as for any other topic, so a read that missed the job reads again. A claim
woken alone that leaves before it clears again (cancelled, closed) hands
its wake to the next waiting one; one found by a second message before it
read (two models, or nobody else waiting) hands both on when it clears,
since its read may take either job. Other listeners of the topic (a watch of
a QUEUED job) are all woken as before.

On one server or Sentinel there is one subscription (SUBSCRIBE of every
channel). On Cluster the scripts SPUBLISH (sharded pub/sub: the message
stays on the shard of the channel's slot), so there is one subscription per
master that serves a partition: SSUBSCRIBE of that master's channels on a
connection to it (docs/cluster.md, "Wake-ups").

If a subscription breaks (connection lost, PING unanswered, or on Cluster a
`sunsubscribe` pushed by Redis because a channel's slot moved away), every
waiter fails at once with StoreUnavailable (never a silent hang) and the
notifier re-locates the channels and subscribes again in the background;
after that every listener is woken once, since messages may have been
missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError

from store.errors import StoreUnavailable
from store.poll import EVERY_CHANGE, TopicListener, stop_task, unindex

log = logging.getLogger(__name__)

# An idle subscription sends PING after this long and counts Redis as gone
# if nothing (not even the PONG) came back within the same time again: a
# hung Redis (SIGSTOP, network partition) fails waiters within ~1 s too.
_POLL_SECONDS = 0.5
_RECONNECT_SECONDS = 0.2
#: A listener of this topic hears every message (the partitioned store's
#: blocking events read: any transition may have appended an event). It
#: needs the changes channel: every event a script appends comes with a "j".
ANY_MESSAGE = EVERY_CHANGE
#: The message kinds (a message's first word) each channel carries.
READY = frozenset({"r"})
CHANGES = frozenset({"j", "q"})
# What a published message reads as: plain pub/sub, sharded pub/sub.
_PUBLISHED = ("message", "smessage")

#: (every channel, the stale ones) -> the client of the node serving each
#: channel now (one client object per node); stale channels are located
#: through Redis first, the others from what the client knows.
Locate = Callable[[Sequence[str], Sequence[str]], Awaitable[list[Redis]]]


class UnheardTopic(RuntimeError):
    """A listener for messages of a channel the store does not subscribe to (a bug)."""


class Listener(TopicListener):
    """Waits for any message among `topics` (e.g. "r gpt-small", "j 01H...")."""

    def __init__(self, notifier: Notifier, topics: Iterable[str], wake_one: bool = False) -> None:
        super().__init__(topics)
        self._notifier = notifier
        # one of the claims an "r" message wakes only one of (module docstring)
        self.wake_one = wake_one
        # the "r" topics it was woken alone for (and any later message of its
        # topics that found it still woken), until its next clear(); handed
        # on if it leaves unread, or if more than one (its read may take one)
        self.owed: list[str] = []
        self.waiting = False

    def _listen(self, topic: str) -> None:
        self._notifier.require(topic)
        self._notifier._index(self, topic)

    def clear(self) -> None:
        super().clear()
        owed, self.owed = self.owed, []
        if len(owed) > 1:
            # e.g. woken for "r b", then "r a" found no other claim of "a"
            # waiting: this read may take either job, so each topic wakes
            # another claim of it (or, none waiting, every claim of it)
            for topic in owed:
                self._notifier._wake_one(topic)

    async def wait(self, timeout: float) -> None:
        """Return on a message, on timeout or at close; raise if pub/sub is down."""
        self._notifier.check()
        self.waiting = True
        self._notifier._queue(self)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), timeout)
        finally:
            self.waiting = False
            self._notifier._unqueue(self)
        self._notifier.check()


class Notifier:
    """The store's subscriptions (one per node serving its channels) and their local listeners."""

    def __init__(self, locate: Locate, sharded: bool = False) -> None:
        # Called on every (re)subscribe: on Cluster it finds the node that owns
        # each channel's slot now, so a failover or a slot move is followed.
        self._locate = locate
        self._sharded = sharded
        self._channels: list[str] = []
        # the message kinds the channels carry: what a listener may wait for
        self._kinds: set[str] = set()
        self._listeners: dict[str, set[Listener]] = {}
        # per "r" topic, the wake_one listeners waiting now, longest first
        # (a dict used as an ordered set)
        self._queues: dict[str, dict[Listener, None]] = {}
        self._subscriptions: list[Subscription] = []
        # Channels whose owner may have changed (their subscription broke):
        # re-located through Redis before the next subscribe.
        self._stale: set[str] = set()
        self._broken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: str | None = "not started"
        self._closed = False
        # Called with (channel, model, job id) for every "r" message, listened to or not.
        self.on_ready: Callable[[str, str, str], None] = lambda channel, model, job_id: None

    def add_channel(self, channel: str, kinds: frozenset[str]) -> None:
        """Also hear `channel`, which carries `kinds` (READY or CHANGES); before start()."""
        self._channels.append(channel)
        self._kinds.update(kinds)

    def hears(self, topic: str) -> bool:
        """Whether a message of `topic` can reach this notifier (a channel carrying it is heard)."""
        if topic == ANY_MESSAGE:
            return self._kinds >= CHANGES
        return topic.partition(" ")[0] in self._kinds

    def require(self, topic: str) -> None:
        """Raise UnheardTopic unless `topic` is heard: a listener would wait for nothing."""
        if not self.hears(topic):
            heard = " ".join(sorted(self._kinds)) or "nothing"
            raise UnheardTopic(f"no subscribed channel carries {topic!r} (heard: {heard})")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def subscriptions(self) -> list[Subscription]:
        """The live subscriptions (tests, debugging)."""
        return [s for s in self._subscriptions if s.live]

    def check(self) -> None:
        if self._error is not None and not self._closed:
            raise StoreUnavailable(f"store notifications are down: {self._error}")

    async def start(self) -> None:
        """Subscribe (raises StoreUnavailable if Redis is down) and start following."""
        self._stale.update(self._channels)
        await self._subscribe()
        self._error = None
        self._task = asyncio.create_task(self._run(), name="jobgate-redis-notify")

    async def close(self) -> None:
        self._closed = True
        await stop_task(self._task)
        for subscription in self._subscriptions:
            await subscription.close()
        self._subscriptions = []
        self._wake_all()

    async def resubscribe(self, primary: tuple[str, int]) -> None:
        """Drop every subscription not on `primary` already (the primary moved: Sentinel).

        Its reader sees the broken connection like any other, fails the
        waiters of the moment, and the notifier subscribes again (on the new
        primary: the pool asks the sentinels) and wakes every listener once.
        A subscription the reader already re-made on `primary` (after the
        old one died) is kept: dropping it would fail its waiters for nothing.
        """
        for subscription in self.subscriptions:
            if subscription.address() not in (None, primary):
                await subscription.disconnect()

    @contextlib.contextmanager
    def listen(self, topics: Iterable[str], wake_one: bool = False) -> Iterator[Listener]:
        """A listener of `topics`; `wake_one` for a claim (see the module docstring)."""
        listener = Listener(self, topics, wake_one)
        for topic in listener.topics:
            self.require(topic)
        for topic in listener.topics:
            self._index(listener, topic)
        try:
            yield listener
        finally:
            self._unqueue(listener)
            unindex(self._listeners, listener)
            if listener.event.is_set():
                # woken alone and gone without reading: the jobs are still
                # claimable and no other claim was told
                for topic in listener.owed:
                    self._wake_one(topic)

    def listeners(self, topic: str) -> int:
        """Listeners of `topic` (waiting or not), in O(1)."""
        return len(self._listeners.get(topic, ()))

    def waiters(self, topic: str) -> int:
        """Listeners of `topic` blocked in wait() right now."""
        return sum(listener.waiting for listener in self._listeners.get(topic, ()))

    def _index(self, listener: Listener, topic: str) -> None:
        self._listeners.setdefault(topic, set()).add(listener)

    def _queue(self, listener: Listener) -> None:
        """`listener` starts waiting: last in line for each of its "r" topics."""
        if not listener.wake_one or listener.event.is_set():
            return  # a set event returns at once: never the one to wake
        for topic in listener.topics:
            if topic.startswith("r "):
                self._queues.setdefault(topic, {})[listener] = None

    def _unqueue(self, listener: Listener) -> None:
        for topic in listener.topics:
            queue = self._queues.get(topic)
            if queue is not None:
                queue.pop(listener, None)
                if not queue:
                    del self._queues[topic]

    def _wake_one(self, topic: str) -> None:
        """Wake the longest-waiting claim of `topic`; if none waits, every claim of it."""
        # skip one whose event is set already (by _wake_all): it has not run yet
        queue = self._queues.get(topic, {})
        chosen = next((listener for listener in queue if not listener.event.is_set()), None)
        if chosen is not None:
            self._unqueue(chosen)
            chosen.waiting = False  # at once: the next message wakes another
            chosen.owed.append(topic)
            chosen.event.set()
            chosen.own_event.set()
            return
        for listener in self._listeners.get(topic, ()):
            if not listener.wake_one:
                continue
            if listener.owed:
                listener.owed.append(topic)  # already woken alone: its one read is spoken for
            listener.event.set()
            listener.own_event.set()

    def _wake_all(self) -> None:
        for waiting in self._listeners.values():
            for listener in waiting:
                listener.event.set()
                listener.own_event.set()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") not in _PUBLISHED:
            return
        data = message.get("data")
        if not isinstance(data, bytes):
            return
        topic = data.decode(errors="replace")
        kind, _, rest = topic.partition(" ")
        model, _, job_id = rest.partition(" ")
        one_job = kind == "r" and bool(job_id)
        if one_job:
            # "r <model> <id>"; a bare "r <model>" (an older server's scripts,
            # mid-upgrade) still wakes all its listeners
            topic = f"r {model}"
            self.on_ready(_channel_name(message.get("channel")), model, job_id)
            self._wake_one(topic)
        for listener in (*self._listeners.get(topic, ()), *self._listeners.get(ANY_MESSAGE, ())):
            if one_job and listener.wake_one:
                continue  # _wake_one chose among these
            listener.event.set()
            if topic in listener.own or ANY_MESSAGE in listener.own:
                listener.own_event.set()

    async def _subscribe(self) -> None:
        """Every channel subscribed on the node serving it now; raises StoreUnavailable.

        A live subscription that holds exactly the channels its node serves
        now is kept; any other is closed and made again (its channels moved,
        or a channel moved to its node). Stale channels are located through
        Redis first (a MOVED or a dead node refreshes the slot map).
        """
        try:
            owners = await self._locate(self._channels, sorted(self._stale))
        except (RedisError, RedisClusterException, OSError) as error:
            raise StoreUnavailable(f"cannot subscribe to notifications: {error}") from error
        groups: dict[int, tuple[Redis, list[str]]] = {}
        for channel, client in zip(self._channels, owners, strict=True):
            groups.setdefault(id(client), (client, []))[1].append(channel)
        kept: list[Subscription] = []
        for subscription in self._subscriptions:
            group = groups.get(id(subscription.client))
            if subscription.live and group is not None and group[1] == subscription.channels:
                kept.append(subscription)
                del groups[id(subscription.client)]
            else:
                await subscription.close()
        self._subscriptions = kept
        for client, channels in groups.values():
            subscription = Subscription(client, channels, self._sharded)
            await subscription.open()
            self._subscriptions.append(subscription)
            subscription.reader = asyncio.create_task(
                self._read(subscription), name="jobgate-redis-notify-read"
            )
        self._stale.clear()

    async def _read(self, subscription: Subscription) -> None:
        """Dispatch one subscription's messages until it breaks, then report it lost."""
        try:
            reason = await subscription.read(self._dispatch)
        except Exception as error:  # a bug must not end wake-ups silently: fail loudly, re-make
            log.exception("redis notifications reader failed")
            reason = repr(error)
        if not self._closed:
            self._lost(subscription, reason)

    def _lost(self, subscription: Subscription, reason: str) -> None:
        """Fail every waiter now (messages may be missed from here on) and re-subscribe."""
        subscription.live = False
        self._stale.update(subscription.channels)
        self._error = reason
        log.warning("redis notifications lost (%s); reconnecting", reason)
        self._wake_all()
        self._broken.set()

    async def _run(self) -> None:
        while not self._closed:
            await self._broken.wait()
            await self._restore()

    async def _restore(self) -> None:
        while True:
            await asyncio.sleep(_RECONNECT_SECONDS)
            self._broken.clear()
            try:
                await self._subscribe()
            except StoreUnavailable:
                continue
            if self._broken.is_set():
                continue  # another subscription broke meanwhile
            self._error = None
            log.info("redis notifications restored")
            self._wake_all()  # messages may have been missed while down
            return


class Subscription:
    """One pub/sub connection: `channels`, all on the node `client` reaches."""

    def __init__(self, client: Redis, channels: list[str], sharded: bool) -> None:
        self.client = client
        self.channels = channels
        self.sharded = sharded
        self.live = False
        self.pubsub: Any = None
        self.reader: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Subscribe; raises StoreUnavailable if the node cannot be reached."""
        # Subscribe confirmations come through (and _dispatch skips them): ignored
        # ones read as None, which the keep-alive below takes for silence.
        pubsub = self.client.pubsub(ignore_subscribe_messages=False)
        self.pubsub = pubsub
        try:
            if self.sharded:
                # one SSUBSCRIBE per channel: Redis refuses one naming several slots
                for channel in self.channels:
                    await pubsub.ssubscribe(channel)
            else:
                await pubsub.subscribe(*self.channels)
        except (RedisError, OSError) as error:
            await self._close_pubsub()
            raise StoreUnavailable(f"cannot subscribe to notifications: {error}") from error
        self.live = True

    async def read(self, dispatch: Callable[[dict[str, Any]], None]) -> str:
        """Hand every message to `dispatch`; return why the subscription ended."""
        awaiting_pong = False
        reader = asyncio.current_task()  # once: each lookup is a getpid syscall on 3.11
        while True:
            try:
                message = await self.pubsub.get_message(timeout=_POLL_SECONDS)
                _raise_if_cancelled(reader)
                if message is None:
                    if awaiting_pong:
                        raise RedisConnectionError("no answer to PING on the subscription")
                    await self.pubsub.ping()
                    _raise_if_cancelled(reader)
            except (RedisError, OSError) as error:
                # also a MOVED answering SSUBSCRIBE: the slot moved before we subscribed
                return str(error) or type(error).__name__
            awaiting_pong = message is None
            if message is None:
                continue
            if message.get("type") == "sunsubscribe":
                # never sent by us: Redis drops a shard channel whose slot moved away
                return f"{_channel_name(message.get('channel'))} moved off its node"
            dispatch(message)

    def address(self) -> tuple[str, int] | None:
        """The (host, port) connected to, or None before the connection is made."""
        connection = getattr(self.pubsub, "connection", None)
        if connection is None:
            return None
        return str(getattr(connection, "host", "")), int(getattr(connection, "port", 0))

    async def disconnect(self) -> None:
        """Cut the connection under the reader (which then reports the subscription lost)."""
        connection = getattr(self.pubsub, "connection", None)
        if connection is not None:
            with contextlib.suppress(RedisError, OSError):
                await connection.disconnect()

    async def close(self) -> None:
        self.live = False
        if self.reader is not asyncio.current_task():
            await stop_task(self.reader)
        self.reader = None
        await self._close_pubsub()

    async def _close_pubsub(self) -> None:
        if self.pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self.pubsub.aclose()
            self.pubsub = None


def _raise_if_cancelled(task: asyncio.Task[Any] | None) -> None:
    """Raise CancelledError if `task` (the reader) was cancelled while redis-py had it.

    redis-py's get_message can swallow a cancel of the task reading it: its
    read answers the cancel like its own read timeout and returns None (seen
    on uvloop on every close, possible on any loop). The reader would then
    read on forever and close() would wait for it forever.
    """
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _channel_name(channel: object) -> str:
    return channel.decode() if isinstance(channel, bytes) else str(channel)
