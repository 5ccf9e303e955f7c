"""RedisStore: the production Store, one Lua script per transition.

Layout, scripts, wake-ups and durability are described in docs/redis-layout.md.
Every hot-path call (submit, get, claim, heartbeat, set_result, cancel) is one
EVALSHA round trip in the steady state; a script that meets a job id or model
its call did not declare in KEYS asks for it before writing anything and is
called again with it declared (store/lua/includes/declared.lua). A Redis
failure of any kind is raised as StoreUnavailable, never read as an empty
answer. Each mutating call carries its own operation key, so redis-py's
resend after a broken connection answers the first run's outcome instead of
running the transition twice (docs/store-semantics.md, "Exactly once per
call").
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import logging
import random
import re
from collections import OrderedDict, deque
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import (
    ClusterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from ulid import ULID

from store import tokens
from store.codes import LuaCode, error_for
from store.errors import (
    FailureHook,
    InvalidRequest,
    QueueFull,
    StoreError,
    StoreMisconfigured,
    StoreUnavailable,
    ignore_failure,
    reporting,
)
from store.keys import Declared, Keys
from store.model import (
    PRIORITIES_IN_CLAIM_ORDER,
    CancelResult,
    ClaimedJob,
    GroupSpec,
    HeartbeatResult,
    Job,
    JobEvent,
    JobKind,
    JobSpec,
    JobStatus,
    Priority,
    ReportAnswer,
    ReportedAndClaimed,
    ResultRecorded,
    ResultReport,
    StoreSettings,
    SubmitRequest,
    SubmitResult,
)
from store.policy import child_key, claim_limit, claim_models, limits, position_settle, watch_view
from store.protocol import Store
from store.redis_codec import (
    claimed_from_reply,
    event_from_emitted,
    event_from_fields,
    job_from_snapshot,
    ms_to_datetime,
    queue_score,
    record,
    to_ms,
)
from store.redis_notify import CHANGES, READY, Listener, Notifier
from store.redis_poll import long_poll
from store.redis_scripts import ArgValue, Scripts
from store.redis_urls import BoundedCluster, Connector, StoreClient

log = logging.getLogger(__name__)

# A stopped Redis must surface as StoreUnavailable within a second.
SOCKET_TIMEOUT = 1.0
CONNECT_TIMEOUT = 0.5
# Claim and watch waits re-check the store this often even without a wake-up.
SAFETY_RECHECK = 5.0
# Due items handled per recovery script call.
RECOVER_BATCH = 100
# Connections of the pool every RPC uses. It is a blocking pool: a burst of
# calls waits (up to SOCKET_TIMEOUT) for a connection instead of failing
# with "Too many connections".
POOL_CONNECTIONS = 64
# Re-reads by woken streams and long polls share this many of those
# connections, so 2,000 streams woken at once queue here (never failing)
# and leave the rest of the pool to RPCs.
WAITER_READS = 16
# On Sentinel, how often the sentinels are asked where the primary is, so
# connections that stayed up through a failover move over (Connector.follow).
FOLLOW_PRIMARY_SECONDS = 0.5
# Leadership, recovery and the health ping run on a pool of their own,
# which no stream, long poll or burst of RPCs can exhaust.
CONTROL_CONNECTIONS = 2
# A claim whose caller is gone is undone in the background; these bound it.
RELEASE_ATTEMPTS = 5
RELEASE_RETRY_DELAY = 0.2
# close() waits this long for such releases before dropping them (their
# leases then expire after lease_timeout, as after a crash).
RELEASE_GRACE = 2.0
# A script that meets undeclared job ids or models (a parent, held children,
# a job's model...) is called again with them declared at most this many
# times in all; each round declares what the previous one found.
DECLARE_ROUNDS = 4
# Per job, what its next transitions touch (its parent, model, idempotency
# key), learned from the replies this store saw, so that a set_result after
# a claim declares them in its first round. A stale hint costs a round.
JOB_HINTS = 10_000
# A claim that stops at an undeclared queue head asks for this many head ids
# per queue, times CLAIM_PEEK_GROWTH for each round in a row that other
# claimers left with nothing, up to CLAIM_PEEK_MAX.
CLAIM_PEEK = 4
CLAIM_PEEK_GROWTH = 4
CLAIM_PEEK_MAX = 64
# Per model, the ids of the last jobs heard becoming claimable ("r" messages,
# this store's own submits): the next claim of the model declares them.
READY_HINTS = 8

_STREAM_ID = re.compile(r"\d+(-\d+)?")

# Redis error replies that mean "not available right now", not a bug.
# redis-py turns some into their own classes and strips the code from the
# text (READONLY, MASTERDOWN, TRYAGAIN...), so both the classes and the
# prefixes of the unclassed ones (BUSY, MISCONF) are listed.
# On Cluster: ClusterDownError (CLUSTERDOWN; MasterDownError is one) while a
# shard fails over, TryAgainError while a slot migrates, and redis-py's own
# ClusterError when its redirections ran out (a slot moving back and forth).
_UNAVAILABLE_ERRORS = (ReadOnlyError, TryAgainError, ClusterDownError, SlotNotCoveredError)
# NOREPLICAS: a primary under min-replicas-to-write with too few replicas
# (one cut off from them, or promoted with none left); UNBLOCKED: a blocked
# read ended because the server was demoted to replica.
_UNAVAILABLE_PREFIXES = (
    "LOADING",
    "BUSY",
    "MISCONF",
    "READONLY",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "NOREPLICAS",
    "UNBLOCKED",
)
# redis-py's cluster client raises these (plain Exceptions, not RedisErrors)
# when no seed node answers or its slot map has holes: Redis is unreachable.
# Its other RedisClusterExceptions (keys of several slots in one call...) are bugs.
_CLUSTER_UNREACHABLE = (
    "Redis Cluster cannot be connected",
    "All slots are not covered",
    "startup_nodes could not agree",
)


@contextlib.contextmanager
def _translated(operation: str) -> Iterator[None]:
    """Turn every redis error into a StoreError; no redis type leaves store/."""
    try:
        yield
    except OutOfMemoryError as error:
        raise QueueFull(f"store out of memory during {operation}") from error
    except _UNAVAILABLE_ERRORS as error:
        raise StoreUnavailable(f"{operation}: {error}") from error
    except ResponseError as error:
        text = str(error)
        if text.startswith("OOM"):
            raise QueueFull(f"store out of memory during {operation}") from error
        if text.startswith(_UNAVAILABLE_PREFIXES):
            raise StoreUnavailable(f"{operation}: {text}") from error
        raise StoreError(f"{operation}: {text}") from error
    except (RedisError, OSError, TimeoutError) as error:
        raise StoreUnavailable(f"{operation}: {error or type(error).__name__}") from error
    except RedisClusterException as error:
        if str(error).startswith(_CLUSTER_UNREACHABLE):
            raise StoreUnavailable(f"{operation}: {error}") from error
        raise StoreError(f"{operation}: {error}") from error


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_code(reply: Any, job_id: str = "", max_group_children: int = 0) -> None:
    if isinstance(reply, list) and reply and isinstance(reply[0], int) and reply[0] < 0:
        raise error_for(reply[0], job_id, max_group_children)


def _keys_needed(reply: Any) -> bool:
    """True for a script's {KEYS_NEEDED, ids, models, keys} (nothing changed)."""
    return (
        isinstance(reply, list)
        and len(reply) == 4
        and isinstance(reply[0], int)
        and reply[0] == LuaCode.KEYS_NEEDED
    )


def _texts(items: Sequence[Any]) -> list[str]:
    return [_text(item) for item in items]


def _declare_needed(script: str, declared: Declared, needed: Sequence[Any]) -> None:
    """Declare what a script asked for ({ids, models, keys}); it must be new."""
    ids, models, raw = needed
    if not declared.add(_texts(ids), _texts(models), _texts(raw)):
        raise StoreError(f"{script}.lua asked again for keys it was given")


@dataclasses.dataclass(frozen=True)
class Elsewhere:
    """What the other partitions hold, read just before a submit script (redis_partitioned.py)."""

    tenant_live: int = 0  # the most live jobs of one of the submitting tenants
    total_live: int = 0
    # (model, priority) -> ready jobs a new job of that class queues behind
    ahead: Mapping[tuple[str, Priority], int] = dataclasses.field(default_factory=dict)


class RedisStore(Store):
    """The Store protocol on Redis (see store/protocol.py for the semantics)."""

    def __init__(
        self,
        url: str,
        settings: StoreSettings,
        partition: str = "default",
        hear_ready: bool = True,
        hear_changes: bool = True,
    ) -> None:
        """`hear_ready` / `hear_changes`: which notification channels to subscribe to.

        Claims need the ready channel; watch() and the partitioned store's
        blocking events read need the changes one (watch() both: a job queued
        ahead moves a QUEUED job's position). A server leaves out what none
        of its calls wait for (the worker-server: changes); a wait that needs
        an unheard channel raises UnheardTopic.
        """
        self.settings = settings
        self.on_failure: FailureHook = ignore_failure
        self.url = url
        # Parses the URL (BadRedisUrl, a ValueError, before any connection)
        # and builds every pool below for its topology: on Sentinel, each
        # pool asks the sentinels for the primary, so all follow a failover.
        self._connector = Connector(url, SOCKET_TIMEOUT, CONNECT_TIMEOUT)
        self.keys = Keys(partition)
        # On Cluster the scripts SPUBLISH (sharded pub/sub, see store/redis_notify.py)
        self._sharded = self._connector.is_cluster
        self._scripts = Scripts(sharded=self._sharded)
        self._client = self._new_client(SOCKET_TIMEOUT, connections=POOL_CONNECTIONS)
        self._control = self._new_client(SOCKET_TIMEOUT, connections=CONTROL_CONNECTIONS)
        self._waiter_reads = asyncio.Semaphore(WAITER_READS)
        # XREAD BLOCK waits longer than SOCKET_TIMEOUT: its own connection,
        # bounded by asyncio.wait_for instead.
        self._blocking = self._new_client(None)
        # No silent reconnect for pub/sub: a lost subscription must fail its
        # waiters (Notifier reconnects and wakes everyone itself). On Cluster
        # there is a plain client per master serving a channel's slot,
        # looked up again on every (re)subscribe (_locate).
        self._pubsub: Redis | None = None
        self._node_clients: dict[tuple[str, int], Redis] = {}
        if not self._connector.is_cluster:
            self._pubsub = self._plain(self._new_client(SOCKET_TIMEOUT, retries=0))
        self._hear_ready = hear_ready
        self._hear_changes = hear_changes
        self._notifier = Notifier(self._locate, sharded=self._sharded)
        self._hear(self.keys)
        self._closed = False
        self._background: set[asyncio.Task[None]] = set()
        self._follower: asyncio.Task[None] | None = None
        # Hints for declaring keys (see _learn), shared with siblings: keyed
        # by job id (unique across partitions) or by partition.
        self._job_hints: OrderedDict[str, Declared] = OrderedDict()
        self._head_hints: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        self._ready_hints: dict[tuple[str, str], deque[str]] = {}
        self._notifier.on_ready = self._heard_ready
        # Hooks of the partitioned store (store/redis_partitioned.py), unused
        # on one partition: where ids come from (one partition's ids), the
        # jobs other partitions queue ahead of a QUEUED job (Get, Watch), and
        # the store whose connections this one shares (None: its own).
        self.new_id: Callable[[], str] = _new_ulid
        self.position_elsewhere: Callable[[Job, str], Awaitable[int]] | None = None
        self.before_submit: Callable[[Sequence[SubmitRequest]], Awaitable[Elsewhere]] | None = None
        self._shares: RedisStore | None = None

    def sibling(self, partition: str) -> RedisStore:
        """A store of another partition on this one's connections, scripts and notifier.

        This store opens and closes what they share; the sibling's close()
        only ends its own work. Call before open() (the notifier subscribes
        to the sibling's channel too).
        """
        twin = copy.copy(self)
        twin.keys = Keys(partition)
        twin._background = set()
        twin._follower = None
        twin._shares = self
        self._hear(twin.keys)
        return twin

    def _hear(self, keys: Keys) -> None:
        """Subscribe (at open) to the partition's channels this store hears."""
        if self._hear_ready:
            self._notifier.add_channel(keys.notify, READY)
        if self._hear_changes:
            self._notifier.add_channel(keys.changes, CHANGES)

    def listen(
        self, topics: Iterable[str], wake_one: bool = False
    ) -> contextlib.AbstractContextManager[Listener]:
        """A listener on this store's notifier (every partition sharing it).

        `wake_one` for a claim: a ready message wakes one claim listener
        (store/redis_notify.py). Raises UnheardTopic for a topic no
        subscribed channel carries."""
        return self._notifier.listen(topics, wake_one)

    def hears(self, topic: str) -> bool:
        """Whether a listener of `topic` can be woken (its channel is subscribed)."""
        return self._notifier.hears(topic)

    @property
    def waiter_reads(self) -> asyncio.Semaphore:
        """The slots re-reads by woken waiters share (see WAITER_READS)."""
        return self._waiter_reads

    async def run_pipelined(
        self, operation: str, script: str, calls: Sequence[tuple[Sequence[str], Sequence[ArgValue]]]
    ) -> list[Any]:
        """A read-only script once per (keys, args), in one pipeline; keys may span partitions."""
        with self._operation(operation):
            return await self._scripts.run_pipelined(self._client, script, calls)

    async def read_pipelined(
        self, operation: str, commands: Sequence[Sequence[ArgValue]]
    ) -> list[Any]:
        """Plain commands in one pipeline, not a transaction: keys may lie in several partitions."""
        with self._operation(operation):
            async with self._client.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                replies: list[Any] = await pipe.execute()
        return replies

    def _new_client(
        self, socket_timeout: float | None, retries: int = 1, connections: int = 8
    ) -> StoreClient:
        # One retry on a broken connection: a pooled connection may be stale
        # after a Redis restart. The resend is safe for scripts: each call's
        # operation key makes a second run answer the first run's outcome.
        # Timeouts are never retried; a claim whose outcome is unknown is
        # released (_undo_claim).
        return self._connector.client(socket_timeout, CONNECT_TIMEOUT, retries, connections)

    @staticmethod
    def _plain(client: StoreClient) -> Redis:
        assert isinstance(client, Redis)  # only a cluster URL builds a cluster client
        return client

    async def _locate(self, channels: Sequence[str], stale: Sequence[str]) -> list[Redis]:
        """The client Notifier subscribes each channel with (see redis_notify.Locate).

        On Cluster, one plain client per master serving a channel's slot.
        The stale channels are touched through the cluster client first (one
        pipeline), so a MOVED or a dead node (a failover, a slot migration)
        updates its slot map before the owners are read from it.
        """
        if self._pubsub is not None:
            return [self._pubsub] * len(channels)
        cluster = self._control
        assert isinstance(cluster, BoundedCluster)
        if stale:
            async with cluster.pipeline(transaction=False) as pipe:
                for channel in stale:
                    pipe.exists(channel)
                await pipe.execute()
        return [self._node_client(cluster, channel) for channel in channels]

    def _node_client(self, cluster: BoundedCluster, channel: str) -> Redis:
        node = cluster.get_node_from_key(channel)
        if node is None:
            raise SlotNotCoveredError(f"no node serves the slot of {channel}")
        address = (node.host, int(node.port))
        client = self._node_clients.get(address)
        if client is None:
            client = self._connector.node_client(*address, SOCKET_TIMEOUT)
            self._node_clients[address] = client
        return client

    # Lifecycle -----------------------------------------------------------------
    async def open(self) -> None:
        if self._shares is not None:
            return  # the store it shares with opens the connections
        with reporting(self.on_failure, "open"):
            with _translated("open"):
                await self._client.ping()
                await self._check_config()
                await self._scripts.load_all(self._client)
            await self._notifier.start()
        if self._connector.follows_primary:
            self._follower = asyncio.create_task(
                self._follow_primary(), name="jobgate-redis-follow-primary"
            )

    async def _follow_primary(self) -> None:
        """Point every pool at the primary the sentinels name now; re-subscribe if it moved."""
        while not self._closed:
            await asyncio.sleep(FOLLOW_PRIMARY_SECONDS)
            try:
                moved = await self._connector.follow()
            except (RedisError, OSError) as error:
                # No primary known (mid-failover) or no sentinel answers: the
                # calls themselves fail as StoreUnavailable meanwhile.
                log.debug("cannot ask the sentinels for the primary: %s", error)
                continue
            if moved is not None:
                log.warning("the Redis primary moved to %s:%d; following it", *moved)
                await self._notifier.resubscribe(moved)

    async def _check_config(self) -> None:
        """Refuse an evicting Redis; warn about one without persistence.

        On Cluster every primary is checked: a slot may live on any of them
        (the partition's today, another after a migration).
        """
        client = self._client
        if isinstance(client, BoundedCluster):
            for node in client.get_primaries():
                await self._check_node_config(client, node.name, node)
        else:
            await self._check_node_config(client, "", None)

    async def _check_node_config(self, client: StoreClient, name: str, node: Any) -> None:
        where = f" on {name}" if name else ""
        try:
            if node is None:
                reply: dict[Any, Any] = await client.config_get("*")
            else:
                reply = await client.config_get("*", target_nodes=node)
        except ResponseError as error:
            log.warning(
                "cannot read the Redis config%s (%s); not checking eviction policy", where, error
            )
            return
        config = {_text(k): _text(v) for k, v in reply.items()}
        policy = config.get("maxmemory-policy", "")
        if policy != "noeviction":
            raise StoreMisconfigured(
                f"Redis maxmemory-policy is {policy!r}{where}: it may evict jobs; "
                "set it to noeviction"
            )
        if config.get("appendonly") == "no" and not config.get("save"):
            log.warning(
                "Redis persistence is off%s (appendonly no, no save rules): "
                "a Redis restart loses every job",
                where,
            )

    async def close(self) -> None:
        self._closed = True
        if self._shares is not None:
            if self._background:
                await asyncio.wait(set(self._background), timeout=RELEASE_GRACE)
            return  # the connections are the other store's to close
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        await self._notifier.close()
        if self._background:
            await asyncio.wait(set(self._background), timeout=RELEASE_GRACE)
        clients: list[StoreClient] = [self._client, self._control, self._blocking]
        clients += [self._pubsub] if self._pubsub is not None else []
        clients += self._node_clients.values()
        for client in clients:
            with contextlib.suppress(RedisError, RedisClusterException, OSError):
                if isinstance(client, BoundedCluster):
                    await client.close_all()
                else:
                    await client.aclose()
        with contextlib.suppress(RedisError, OSError):
            await self._connector.aclose()

    async def ping(self) -> None:
        with self._operation("ping"):
            if isinstance(self._control, BoundedCluster):
                # PING would go to one arbitrary node: ask the partition's master instead,
                # so health says whether this partition is served.
                await self._control.exists(self.keys.leader)
            else:
                await self._control.ping()

    # Plumbing ------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("the store is closed")

    @contextlib.contextmanager
    def _operation(self, operation: str) -> Iterator[None]:
        """Every Redis call runs inside, named by its Store method.

        A closed store and every redis error become StoreErrors, and the
        failures among them are reported to `on_failure` (store error metrics).
        """
        with reporting(self.on_failure, operation):
            self._check_open()
            with _translated(operation):
                yield

    async def _run(
        self,
        script: str,
        keys: Sequence[str],
        args: Sequence[ArgValue],
        operation: str | None = None,
        client: StoreClient | None = None,
    ) -> Any:
        """Run a script; `operation` (default: the script's name) names the call.

        `client` is the RPC pool unless given (recovery runs on its own).
        """
        with self._operation(operation or script):
            return await self._scripts.run(client or self._client, script, keys, args)

    def _op_key(self) -> str:
        """A fresh operation key: the last KEY of a transition that must run once per call."""
        return self.keys.op(tokens.operation_id())

    def _common_args(self) -> list[ArgValue]:
        """ARGV[1..4] of every transition script (includes/common.lua)."""
        return [
            self.keys.notify,
            self.keys.changes,
            self.settings.events_max_length,
            to_ms(self.settings.result_ttl),
        ]

    async def _run_declared(
        self,
        script: str,
        keys: Sequence[str],
        args: Sequence[ArgValue],
        declared: Declared,
        trailing: Sequence[str] = (),
        operation: str | None = None,
        client: StoreClient | None = None,
        transition: bool = True,
    ) -> Any:
        """One call of a script that takes declared keys (includes/declared.lua).

        KEYS: (the transition keys), `keys`, the declared groups, `trailing`
        (an operation key stays last); ARGV: (the common args), `args`, the
        declaration tail.
        """
        all_keys, all_args = self._declared_call(keys, args, declared, trailing, transition)
        return await self._run(script, all_keys, all_args, operation, client)

    def _declared_call(
        self,
        keys: Sequence[str],
        args: Sequence[ArgValue],
        declared: Declared,
        trailing: Sequence[str] = (),
        transition: bool = True,
    ) -> tuple[list[str], list[ArgValue]]:
        """KEYS and ARGV of a script call with declared keys (see _run_declared)."""
        fixed = [*self.keys.transition_keys(), *keys] if transition else list(keys)
        common = self._common_args() if transition else []
        return (
            [*fixed, *self.keys.declared_keys(declared), *trailing],
            [*common, *args, *declared.tail(len(fixed) + 1)],
        )

    async def _declared(
        self,
        script: str,
        keys: Sequence[str],
        args: Sequence[ArgValue],
        declared: Declared,
        trailing: Sequence[str] = (),
        operation: str | None = None,
        client: StoreClient | None = None,
        transition: bool = True,
    ) -> Any:
        """Run a script until it stops asking for keys (DECLARE_ROUNDS at most).

        A KEYS_NEEDED answer changed nothing, so the call is simply made
        again with more declared (and the same operation key).
        """
        for _ in range(DECLARE_ROUNDS):
            reply = await self._run_declared(
                script, keys, args, declared, trailing, operation, client, transition
            )
            if not _keys_needed(reply):
                return reply
            _declare_needed(script, declared, reply[1:])
        with reporting(self.on_failure, operation or script):
            raise StoreError(f"{script}.lua still met undeclared keys after {DECLARE_ROUNDS} calls")

    # Hints -----------------------------------------------------------------------
    def _learn(self, job: Job) -> None:
        """Remember what job's next transitions touch (JOB_HINTS)."""
        hint = Declared([job.id, job.parent_id], [job.model])
        if job.idempotency_key and job.kind is not JobKind.CHILD:
            hint.add(raw=[self.keys.idempotency(job.tenant, job.idempotency_key)])
        hint.add(ids=[child.id for child in job.children])
        self._job_hints[job.id] = hint
        self._job_hints.move_to_end(job.id)
        while len(self._job_hints) > JOB_HINTS:
            self._job_hints.popitem(last=False)

    def _heard_ready(self, channel: str, model: str, job_id: str) -> None:
        hints = self._ready_hints.setdefault((channel, model), deque(maxlen=READY_HINTS))
        hints.append(job_id)

    def _hinted(self, *job_ids: str) -> Declared:
        """Declare `job_ids` and what this store learned they touch."""
        declared = Declared(list(job_ids))
        for job_id in job_ids:
            hint = self._job_hints.get(job_id)
            if hint is not None:
                declared.add(hint.ids, hint.models, hint.raw)
        return declared

    def _job(self, snapshot: Any) -> Job:
        job = job_from_snapshot(snapshot)
        self._learn(job)
        return job

    def _job_submitted(self, snapshot: Any) -> Job:
        job = self._job(snapshot)
        if job.status is JobStatus.QUEUED and job.kind is not JobKind.GROUP:
            self._heard_ready(self.keys.notify, job.model, job.id)
        return job

    def _claimed(self, entry: Any) -> ClaimedJob:
        """claim_jobs.lua's entry; its 5th item (held siblings) is a hint for the end."""
        claimed = claimed_from_reply(entry[:4])
        self._learn(claimed.job)
        if len(entry) > 4:
            self._job_hints[claimed.job.id].add(_texts(entry[4]))
        return claimed

    # Submit --------------------------------------------------------------------
    async def _elsewhere(self, requests: Sequence[SubmitRequest]) -> Elsewhere:
        return Elsewhere() if self.before_submit is None else await self.before_submit(requests)

    def _caps(self, elsewhere: Elsewhere) -> tuple[int, int]:
        """(max_live_per_tenant, max_live_total) as this partition applies them."""
        s = self.settings
        return (
            max(s.max_live_per_tenant - elsewhere.tenant_live, 0),
            max(s.max_live_total - elsewhere.total_live, 0),
        )

    async def _submitted(self, reused: bool, snapshot: Any, elsewhere: Elsewhere) -> SubmitResult:
        job = self._job_submitted(snapshot)
        if reused:
            job = await self._positioned(job, snapshot)  # an older job: count as Get does
        elif job.queue_position is not None:
            # a new job queues behind what the other partitions held just before
            ahead = elsewhere.ahead.get((job.model, job.priority), 0)
            job = dataclasses.replace(job, queue_position=job.queue_position + ahead)
        return SubmitResult(job=job, reused=reused)

    async def submit(self, request: SubmitRequest) -> SubmitResult:
        spec, payloads = self._spec(request)
        keys = []
        if request.idempotency_key:
            keys.append(self.keys.idempotency(request.tenant, request.idempotency_key))
        elsewhere = await self._elsewhere([request])
        per_tenant, total = self._caps(elsewhere)
        args: list[ArgValue] = [
            request.tenant,
            request.fingerprint(),
            per_tenant,
            total,
            self.settings.max_group_children,
            json.dumps(spec),
            1 if keys else 0,
            *payloads,
        ]
        reply = await self._declared(
            "submit", keys, args, _spec_declared(spec), trailing=[self._op_key()]
        )
        _check_code(reply, max_group_children=self.settings.max_group_children)
        return await self._submitted(bool(reply[1]), reply[2], elsewhere)

    async def submit_batch(self, requests: Sequence[SubmitRequest]) -> list[SubmitResult]:
        if not requests:
            return []
        transition_keys = self.keys.transition_keys()
        keys: list[str] = []
        items: list[ArgValue] = []
        payloads: list[ArgValue] = []
        declared = Declared()
        for request in requests:
            spec, item_payloads = self._spec(request)
            item_declared = _spec_declared(spec)
            declared.add(item_declared.ids, item_declared.models)
            key_index = 0
            if request.idempotency_key:
                keys.append(self.keys.idempotency(request.tenant, request.idempotency_key))
                key_index = len(transition_keys) + len(keys)  # Lua's 1-based KEYS index
            # Only a keyed item is ever compared, so only it pays for the digest.
            fingerprint = request.fingerprint() if request.idempotency_key else ""
            items.append(
                json.dumps(
                    {**spec, "tenant": request.tenant, "fingerprint": fingerprint, "key": key_index}
                )
            )
            payloads.extend(item_payloads)
        s = self.settings
        elsewhere = await self._elsewhere(requests)
        per_tenant, total = self._caps(elsewhere)
        args: list[ArgValue] = [
            per_tenant,
            total,
            s.max_group_children,
            len(items),
            *items,
            *payloads,
        ]
        reply = await self._declared(
            "submit_batch", keys, args, declared, trailing=[self._op_key()]
        )
        if reply[0] < 0:
            error = error_for(reply[0], max_group_children=s.max_group_children)
            raise error.for_item(int(reply[1]))
        return [
            await self._submitted(bool(flag), snap, elsewhere)
            for flag, snap in zip(reply[1], reply[2], strict=True)
        ]

    def _job_spec(self, spec: JobSpec, idempotency_key: str) -> dict[str, Any]:
        effective = limits(spec, self.settings)
        return {
            "id": self.new_id(),
            "model": spec.model,
            "content_type": spec.content_type,
            "labels": json.dumps(dict(spec.labels), sort_keys=True),
            "max_attempts": effective.max_attempts,
            "queue_timeout": to_ms(effective.queue_timeout),
            "run_timeout": to_ms(effective.run_timeout),
            "idempotency_key": idempotency_key,
        }

    def _spec(self, request: SubmitRequest) -> tuple[dict[str, Any], list[bytes]]:
        key = request.idempotency_key
        work = request.work
        if isinstance(work, GroupSpec):
            children = [
                self._job_spec(child, child_key(key, index))
                for index, child in enumerate(work.children)
            ]
            parent: dict[str, Any] = {
                "id": self.new_id(),
                "model": work.children[0].model if work.children else "",
                "content_type": "",
                "labels": "{}",
                "max_attempts": 0,
                "queue_timeout": 0,
                "run_timeout": 0,
                "idempotency_key": key,
            }
            spec = {
                **parent,
                "kind": JobKind.GROUP.value,
                "priority": int(request.priority),
                "max_parallel": max(0, work.max_parallel),
                "jobs": children,
            }
            return spec, [child.payload for child in work.children]
        single = self._job_spec(work, key)
        spec = {
            "kind": JobKind.SINGLE.value,
            "id": single["id"],
            "priority": int(request.priority),
            "max_parallel": 0,
            "jobs": [single],
        }
        return spec, [work.payload]

    # Reads ---------------------------------------------------------------------
    async def get(self, tenant: str, job_id: str) -> Job:
        return await self._get(tenant, job_id, "get")

    async def _get(self, tenant: str, job_id: str, operation: str) -> Job:
        reply = await self._declared(
            "get",
            [],
            [job_id, tenant],
            self._hinted(job_id),
            operation=operation,
            transition=False,
        )
        _check_code(reply, job_id)
        return await self._positioned(self._job(reply[1]), reply[1])

    async def _positioned(self, job: Job, snapshot: Any) -> Job:
        """The job with the jobs other partitions queue ahead of it counted in."""
        if self.position_elsewhere is None or job.queue_position is None:
            return job
        ahead = await self.position_elsewhere(job, queue_score(snapshot))
        return dataclasses.replace(job, queue_position=job.queue_position + ahead)

    async def payload(self, tenant: str, job_id: str) -> bytes:
        reply = await self._run(
            "payload", [self.keys.job(job_id), self.keys.payload(job_id)], [tenant]
        )
        _check_code(reply, job_id)
        return bytes(reply[1])

    async def list_children(self, tenant: str, job_id: str) -> list[Job]:
        reply = await self._declared(
            "children",
            [],
            [job_id, tenant],
            self._hinted(job_id),
            operation="list_children",
            transition=False,
        )
        _check_code(reply, job_id)
        jobs = [self._job(snap) for snap in reply[1]]
        return sorted(jobs, key=lambda job: job.child_index)

    # Claim ---------------------------------------------------------------------
    async def claim(
        self,
        worker_id: str,
        models: Sequence[str],
        max_jobs: int = 1,
        wait: timedelta = timedelta(0),
    ) -> list[ClaimedJob]:
        models = claim_models(models)
        if not models:
            return []
        max_jobs = claim_limit(max_jobs)
        return await long_poll(
            self._notifier.listen((f"r {model}" for model in models), wake_one=True),
            lambda: self._claim_once(worker_id, models, max_jobs),
            wait,
            closed=lambda: self._closed,
            reads=self._waiter_reads,
            on_failure=self.on_failure,
            recheck=_recheck,
        )

    def waiting_claims(self, model: str) -> int:
        """Claims on this RedisStore blocked waiting for `model` (tests, debugging)."""
        return self._notifier.waiters(f"r {model}")

    async def _claim_once(
        self, worker_id: str, models: list[str], max_jobs: int
    ) -> list[ClaimedJob]:
        declared = self._claim_declared(models)
        entries, needed = await self._claim_round(worker_id, models, max_jobs, declared)
        return await self._claim_rest(worker_id, models, max_jobs, entries, declared, needed)

    def _claim_declared(self, models: list[str], *more: Declared) -> Declared:
        """A claim's declaration: its models, the head ids the last claim saw
        and the ids last heard becoming claimable."""
        heads = self._head_hints.get((self.keys.partition, tuple(models)), [])
        declared = Declared(list(heads), list(models))
        for model in models:
            declared.add(self._ready_hints.get((self.keys.notify, model), ()))
        for extra in more:
            declared.add(extra.ids, extra.models, extra.raw)
        return declared

    async def _claim_rest(
        self,
        worker_id: str,
        models: list[str],
        max_jobs: int,
        claimed: list[ClaimedJob],
        declared: Declared,
        needed: list[str],
    ) -> list[ClaimedJob]:
        """While a claim stopped at heads it had not declared, claim on with them declared.

        Each job's claim is a complete transition, so the claimed ones stand;
        only DECLARE_ROUNDS rounds in a row that claim nothing fail the call.
        """
        stalls = 0
        while needed and len(claimed) < max_jobs:
            _declare_needed("claim", declared, [needed, [], []])
            # heads lost to other claimers: ask for more of them next time
            peek = min(CLAIM_PEEK * CLAIM_PEEK_GROWTH**stalls, CLAIM_PEEK_MAX)
            entries, needed = await self._claim_round(
                worker_id, models, max_jobs - len(claimed), declared, peek
            )
            claimed += entries
            stalls = 0 if entries else stalls + 1
            if stalls >= DECLARE_ROUNDS and needed:
                if claimed:
                    break
                with reporting(self.on_failure, "claim"):
                    raise StoreError(
                        f"claim.lua still met undeclared heads after {DECLARE_ROUNDS} calls"
                    )
        return claimed

    async def _claim_round(
        self,
        worker_id: str,
        models: list[str],
        max_jobs: int,
        declared: Declared,
        peek: int = CLAIM_PEEK,
    ) -> tuple[list[ClaimedJob], list[str]]:
        """One claim.lua call: the jobs claimed and the head ids it stopped for."""
        args: list[ArgValue] = [
            worker_id,
            to_ms(self.settings.lease_timeout),
            max_jobs,
            peek,
            len(models),
            *models,
            *tokens.lease_ids(max_jobs),
        ]
        op_key = self._op_key()
        call = self._run_declared("claim", [], args, declared, trailing=[op_key])
        entries, needed, hints = await self._shielded_claim(op_key, declared, call)
        claimed = [self._claimed(entry) for entry in entries]
        self._head_hint(models, hints, claimed)
        return claimed, _texts(needed)

    def _head_hint(
        self, models: list[str], hints: Sequence[Any], claimed: list[ClaimedJob]
    ) -> None:
        """The next claim of `models` declares the heads seen now, and the
        parents of the children just claimed (their siblings queue next)."""
        parents = [c.job.parent_id for c in claimed if c.job.parent_id]
        heads = [*_texts(hints), *dict.fromkeys(parents)]
        self._head_hints[(self.keys.partition, tuple(models))] = heads

    async def _shielded_claim(
        self,
        op_key: str,
        declared: Declared,
        script: Coroutine[Any, Any, Any],
        claims: bool = True,
    ) -> Any:
        """Run a claiming script; if its caller is gone or its outcome unknown, undo its leases."""
        call = asyncio.ensure_future(script)
        try:
            # shielded: a caller cancelled now must not drop leases the script made
            return await asyncio.shield(call)
        except (asyncio.CancelledError, StoreUnavailable):
            # cancelled, a timeout, or the connection broke again: the script may have run
            if claims:
                self._in_background(self._undo_claim(op_key, declared, call))
            raise

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _undo_claim(
        self, op_key: str, claim_declared: Declared, call: asyncio.Future[Any]
    ) -> None:
        """Once the claim call settled, give back whatever it leased (nobody got it).

        It runs even while the store closes (close() waits RELEASE_GRACE for it).
        The claim could lease only ids it declared, so the release declares them.
        """
        await asyncio.wait([call])
        declared = Declared(list(claim_declared.ids), list(claim_declared.models))
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                with reporting(self.on_failure, "release"), _translated("release"):
                    released = await self._release_claim(op_key, declared)
            except StoreError as error:
                if attempt + 1 < RELEASE_ATTEMPTS:
                    await asyncio.sleep(RELEASE_RETRY_DELAY)
                    continue
                log.warning(
                    "could not release an abandoned claim (%s); its leases expire after "
                    "the lease timeout",
                    error,
                )
                return
            if released:
                log.info("released %d lease(s) of a claim whose caller was gone", released)
            return

    async def _release_claim(self, op_key: str, declared: Declared) -> int:
        """release.lua of a claim's operation key, on a store that may be closing."""
        for _ in range(DECLARE_ROUNDS):
            keys, args = self._declared_call([], [1], declared, [op_key])
            reply = await self._scripts.run(self._client, "release", keys, args)
            if not _keys_needed(reply):
                return int(reply)
            _declare_needed("release", declared, reply[1:])
        raise StoreError(f"release.lua still met undeclared keys after {DECLARE_ROUNDS} calls")

    async def release(self, leases: Sequence[ClaimedJob]) -> int:
        if not leases:
            return 0
        args: list[ArgValue] = [0]
        args += [value for item in leases for value in (item.job.id, item.lease_id)]
        declared = self._hinted(*(item.job.id for item in leases))
        reply = await self._declared("release", [], args, declared)
        return int(reply)

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult:
        progress = min(max(progress, 0.0), 1.0)
        reply = await self._declared(
            "heartbeat",
            [],
            [job_id, lease_id, repr(progress), stage, to_ms(self.settings.lease_timeout)],
            Declared([job_id]),
        )
        _check_code(reply, job_id)
        return HeartbeatResult(
            lease_expire_time=ms_to_datetime(reply[1]), cancel_requested=bool(reply[2])
        )

    async def record_result(
        self, job_id: str, lease_id: str, report: ResultReport
    ) -> ResultRecorded:
        if report.status not in (JobStatus.COMPLETED, JobStatus.FAILED):
            raise InvalidRequest("status", "must be COMPLETED or FAILED")
        s = self.settings
        reply = await self._declared(
            "set_result",
            [],
            [
                job_id,
                lease_id,
                report.status.value,
                report.result,
                report.result_content_type,
                report.error_code,
                report.error_message,
                1 if report.retryable else 0,
                to_ms(s.retry_backoff_base),
                to_ms(s.retry_backoff_max),
            ],
            self._hinted(job_id),
            trailing=[self._op_key()],
        )
        _check_code(reply, job_id)
        return ResultRecorded(self._job(reply[1]), applied=reply[2] == 1)

    async def report_and_claim(
        self,
        worker_id: str,
        models: Sequence[str],
        results: Sequence[tuple[str, str, ResultReport]],
        max_jobs: int,
    ) -> ReportedAndClaimed:
        for _, _, report in results:
            if report.status not in (JobStatus.COMPLETED, JobStatus.FAILED):
                raise InvalidRequest("status", "must be COMPLETED or FAILED")
        models = claim_models(models) if max_jobs > 0 else []
        max_jobs = claim_limit(max_jobs) if models else 0
        s = self.settings
        declared = self._claim_declared(models, self._hinted(*(job_id for job_id, _, _ in results)))
        claim_op = self._op_key()
        args: list[ArgValue] = [
            worker_id,
            to_ms(s.lease_timeout),
            max_jobs,
            len(models),
            len(results),
            to_ms(s.retry_backoff_base),
            to_ms(s.retry_backoff_max),
        ]
        for job_id, lease_id, report in results:
            args += [job_id, lease_id, report.status.value, report.result,
                     report.result_content_type, report.error_code, report.error_message,
                     1 if report.retryable else 0]  # fmt: skip
        args += [*models, *tokens.lease_ids(max_jobs)]
        trailing = [self._op_key(), claim_op]
        reply = await self._shielded_claim(
            claim_op,
            declared,
            self._declared("report_and_claim", [], args, declared, trailing),
            max_jobs > 0,
        )
        answers = [
            self._report_answer(job_id, code, snapshot)
            for (job_id, _, _), (code, snapshot) in zip(results, reply[0], strict=True)
        ]

        claimed = [self._claimed(entry) for entry in reply[1]]
        if models:
            self._head_hint(models, reply[3], claimed)
        needed = _texts(reply[2])
        claimed = await self._claim_rest(worker_id, models, max_jobs, claimed, declared, needed)
        return ReportedAndClaimed(answers, claimed)

    def _report_answer(self, job_id: str, code: int, snapshot: Any) -> ReportAnswer:
        if code < 0:
            return ReportAnswer(job_id, refused=error_for(code, job_id))
        return ReportAnswer(job_id, ResultRecorded(self._job(snapshot), applied=code == 1))

    async def cancel(self, tenant: str, job_id: str, reason: str = "") -> CancelResult:
        reply = await self._declared(
            "cancel", [], [job_id, tenant, reason], self._hinted(job_id), [self._op_key()]
        )
        _check_code(reply, job_id)
        return CancelResult(job=self._job(reply[1]), cancelled=reply[0] == 1)

    # Recovery ------------------------------------------------------------------
    async def recover(self) -> list[JobEvent]:
        s = self.settings
        backoff = [to_ms(s.retry_backoff_base), to_ms(s.retry_backoff_max)]
        events: list[JobEvent] = []
        for name, extra in (
            ("recover_run_timeouts", backoff),
            ("recover_leases", []),
            ("recover_retries", []),
            ("recover_queue_timeouts", []),
        ):
            events += await self._recover_all(name, extra)
        return events

    async def _recover_all(self, name: str, extra: Sequence[ArgValue]) -> list[JobEvent]:
        """Run one recovery script until nothing is due, in batches of RECOVER_BATCH.

        A batch stops before a due id it did not declare (includes/recover.lua);
        the next call declares what it asked for. DECLARE_ROUNDS calls in a
        row that handle nothing fail the call.
        """
        events: list[JobEvent] = []
        declared = Declared()
        stalls = 0
        while True:
            handled, emitted, needed = await self._run_declared(
                name, [], [RECOVER_BATCH, *extra], declared, [], "recover", self._control
            )
            events.extend(event_from_emitted(entry) for entry in emitted)
            if any(needed):
                stalls = 0 if handled else stalls + 1
                if stalls >= DECLARE_ROUNDS:
                    with reporting(self.on_failure, "recover"):
                        raise StoreError(
                            f"{name}.lua still met undeclared keys after {DECLARE_ROUNDS} calls"
                        )
                _declare_needed(name, declared, needed)
            elif handled < RECOVER_BATCH:
                return events
            else:
                declared = Declared()

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        reply = await self._run(
            "acquire_leadership",
            [self.keys.leader],
            [holder, to_ms(ttl)],
            client=self._control,
        )
        return bool(reply)

    # Watch and events ------------------------------------------------------------
    async def watch(self, tenant: str, job_id: str) -> AsyncIterator[Job]:
        with self._notifier.listen([f"j {job_id}"]) as listener:
            job = await self._waiter_get(tenant, job_id)
            seen: tuple[object, ...] | None = None
            while True:
                if job.status is JobStatus.QUEUED and job.kind is not JobKind.GROUP:
                    # positions move when the queue shrinks or a job is queued
                    # ahead; a move published between our read and now was
                    # not heard, so read again once the topics are new
                    new_q = listener.add(f"q {job.model}")
                    new_r = listener.add(f"r {job.model}")
                    if new_q or new_r:
                        listener.clear()
                        job = await self._waiter_get(tenant, job_id)
                if watch_view(job) != seen:
                    seen = watch_view(job)
                    yield job
                if job.terminal or self._closed:
                    return
                with reporting(self.on_failure, "watch"):
                    await listener.wait(_recheck())
                    await listener.settle(
                        position_settle(self._notifier.listeners(f"q {job.model}"))
                    )
                if self._closed:
                    return
                listener.clear()  # before the read: a change after it is kept
                job = await self._waiter_get(tenant, job_id)

    async def _waiter_get(self, tenant: str, job_id: str) -> Job:
        """A stream's read: queued behind other streams, never failing for want of a connection."""
        async with self._waiter_reads:
            return await self._get(tenant, job_id, "watch")

    async def events(
        self,
        after: str = "0",
        count: int = 100,
        block: timedelta | None = None,
    ) -> list[JobEvent]:
        if not _STREAM_ID.fullmatch(after):
            raise InvalidRequest("after", f"not an event id: {after!r}")
        streams: dict[Any, Any] = {self.keys.events: after}
        with self._operation("events"):
            if block is None:
                reply: Any = await self._client.xread(streams, count=count)
            else:
                block_ms = max(to_ms(block), 1)
                reply = await asyncio.wait_for(
                    self._blocking.xread(streams, count=count, block=block_ms),
                    block.total_seconds() + SOCKET_TIMEOUT,
                )
        if not reply:
            return []
        _, entries = reply[0]
        return [
            event_from_fields(entry_id.decode(), {k.decode(): v for k, v in fields.items()})
            for entry_id, fields in entries
        ]

    async def newest_event_id(self) -> str:
        with self._operation("newest_event_id"):
            newest: Any = await self._client.xrevrange(self.keys.events, count=1)
        return _text(newest[0][0]) if newest else "0"

    # Gauges ----------------------------------------------------------------------
    async def queue_depths(self) -> dict[tuple[str, Priority], int]:
        with self._operation("queue_depths"):
            members: Any = await self._client.smembers(self.keys.models)
            models = sorted(m.decode() for m in members)
            pairs = [(m, p) for m in models for p in PRIORITIES_IN_CLAIM_ORDER]
            async with self._client.pipeline(transaction=False) as pipe:
                for model, priority in pairs:
                    pipe.zcard(self.keys.queue(model, priority))
                sizes = await pipe.execute()
        return {pair: int(size) for pair, size in zip(pairs, sizes, strict=True)}

    async def in_flight(self) -> dict[str, int]:
        with self._operation("in_flight"):
            models: Any = await self._client.smembers(self.keys.models)
            counts: Any = await self._client.hgetall(self.keys.in_flight)
        flat = record([item for pair in counts.items() for item in pair])
        result = {m.decode(): 0 for m in models}
        result.update({model: int(count) for model, count in flat.items()})
        return result


def _new_ulid() -> str:
    return str(ULID())


def _recheck() -> float:
    """The safety re-check delay, jittered so streams opened together do not re-read together."""
    return SAFETY_RECHECK * random.uniform(0.8, 1.2)


def _spec_declared(spec: dict[str, Any]) -> Declared:
    """A submit's declaration: every job id it creates (the root, the
    children) and every model they queue on."""
    jobs = spec["jobs"]
    return Declared([spec["id"], *(job["id"] for job in jobs)], [job["model"] for job in jobs])
