"""The connections one Redis deployment's store uses, shared by all its partitions.

One `Connection` per store: the pools of the topology (store/redis/pools.py),
the loaded scripts, and the notifier with its pub/sub subscriptions
(store/redis/notify.py). It opens and checks Redis (an evicting policy is
refused), follows a Sentinel failover, and turns every redis error into a
StoreError (`translated`): no redis type leaves store/.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence
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

from store.errors import QueueFull, StoreError, StoreMisconfigured, StoreUnavailable
from store.keys import Keys
from store.poll import stop_task
from store.redis.notify import CHANGES, READY, Notifier
from store.redis.pools import BoundedCluster, Connector, StoreClient
from store.redis.scripts import ArgValue, Scripts

log = logging.getLogger("store.redis")

# A stopped Redis must surface as StoreUnavailable within a second.
SOCKET_TIMEOUT = 1.0
CONNECT_TIMEOUT = 0.5
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
def translated(operation: str) -> Iterator[None]:
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


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Connection:
    """Pools, scripts and the notifier of one store, opened and closed once."""

    def __init__(self, url: str, hear_ready: bool = True, hear_changes: bool = True) -> None:
        """`hear_ready` / `hear_changes`: which notification channels to subscribe to.

        Claims need the ready channel; watches and the blocking events read
        need the changes one. A server leaves out what none of its calls
        wait for (the worker-server: changes); a wait that needs an unheard
        channel raises UnheardTopic.
        """
        # Parses the URL (BadRedisUrl, a ValueError, before any connection)
        # and builds every pool below for its topology: on Sentinel, each
        # pool asks the sentinels for the primary, so all follow a failover.
        self._connector = Connector(url, SOCKET_TIMEOUT, CONNECT_TIMEOUT)
        self.url = url
        # On Cluster the scripts SPUBLISH (sharded pub/sub, store/redis/notify.py)
        self.sharded = self._connector.is_cluster
        self.scripts = Scripts(sharded=self.sharded)
        self.rpc = self._new_client(SOCKET_TIMEOUT, connections=POOL_CONNECTIONS)
        self.control = self._new_client(SOCKET_TIMEOUT, connections=CONTROL_CONNECTIONS)
        self.waiter_reads = asyncio.Semaphore(WAITER_READS)
        # XREAD BLOCK waits longer than SOCKET_TIMEOUT: its own connection,
        # bounded by asyncio.wait_for instead.
        self.blocking = self._new_client(None)
        # No silent reconnect for pub/sub: a lost subscription must fail its
        # waiters (Notifier reconnects and wakes everyone itself). On Cluster
        # there is a plain client per master serving a channel's slot,
        # looked up again on every (re)subscribe (_locate).
        self._pubsub: Redis | None = None
        self._node_clients: dict[tuple[str, int], Redis] = {}
        if not self._connector.is_cluster:
            self._pubsub = _plain(self._new_client(SOCKET_TIMEOUT, retries=0))
        self._hear_ready = hear_ready
        self._hear_changes = hear_changes
        self.notifier = Notifier(self._locate, sharded=self.sharded)
        self.closed = False
        self._follower: asyncio.Task[None] | None = None

    @property
    def is_cluster(self) -> bool:
        return self._connector.is_cluster

    def hear(self, keys: Keys) -> None:
        """Subscribe (at open) to the partition's channels this store hears."""
        if self._hear_ready:
            self.notifier.add_channel(keys.notify, READY)
        if self._hear_changes:
            self.notifier.add_channel(keys.changes, CHANGES)

    def _new_client(
        self, socket_timeout: float | None, retries: int = 1, connections: int = 8
    ) -> StoreClient:
        # One retry on a broken connection: a pooled connection may be stale
        # after a Redis restart. The resend is safe for scripts: each call's
        # operation key makes a second run answer the first run's outcome.
        # Timeouts are never retried; a claim whose outcome is unknown is
        # released (store/redis/partition.py).
        return self._connector.client(socket_timeout, CONNECT_TIMEOUT, retries, connections)

    async def _locate(self, channels: Sequence[str], stale: Sequence[str]) -> list[Redis]:
        """The client Notifier subscribes each channel with (see notify.Locate).

        On Cluster, one plain client per master serving a channel's slot.
        The stale channels are touched through the cluster client first (one
        pipeline), so a MOVED or a dead node (a failover, a slot migration)
        updates its slot map before the owners are read from it.
        """
        if self._pubsub is not None:
            return [self._pubsub] * len(channels)
        cluster = self.control
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
        with translated("open"):
            await self.rpc.ping()
            await self._check_config()
            await self.scripts.load_all(self.rpc)
        await self.notifier.start()
        if self._connector.follows_primary:
            self._follower = asyncio.create_task(
                self._follow_primary(), name="jobgate-redis-follow-primary"
            )

    async def _follow_primary(self) -> None:
        """Point every pool at the primary the sentinels name now; re-subscribe if it moved."""
        while not self.closed:
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
                await self.notifier.resubscribe(moved)

    async def _check_config(self) -> None:
        """Refuse an evicting Redis; warn about one without persistence.

        On Cluster every primary is checked: a slot may live on any of them
        (a partition's today, another after a migration).
        """
        client = self.rpc
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
        config = {text(k): text(v) for k, v in reply.items()}
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
        self.closed = True
        await stop_task(self._follower)
        await self.notifier.close()

    async def close_clients(self) -> None:
        """Close every pool (after the partitions finished their background work)."""
        clients: list[StoreClient] = [self.rpc, self.control, self.blocking]
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

    async def ping(self, keys: Keys) -> None:
        with translated("ping"):
            if isinstance(self.control, BoundedCluster):
                # PING would go to one arbitrary node: ask the partition's master instead,
                # so health says whether this partition is served.
                await self.control.exists(keys.leader)
            else:
                await self.control.ping()

    def check_open(self) -> None:
        if self.closed:
            raise StoreUnavailable("the store is closed")

    # Calls ---------------------------------------------------------------------
    async def run(
        self,
        operation: str,
        script: str,
        keys: Sequence[str],
        args: Sequence[ArgValue],
        client: StoreClient | None = None,
    ) -> Any:
        """One script by SHA; `client` is the RPC pool unless given (recovery runs on its own)."""
        self.check_open()
        with translated(operation):
            return await self.scripts.run(client or self.rpc, script, keys, args)

    async def run_pipelined(
        self,
        operation: str,
        script: str,
        calls: Sequence[tuple[Sequence[str], Sequence[ArgValue]]],
        client: StoreClient | None = None,
    ) -> list[Any]:
        """A read-only script once per (keys, args), in one pipeline; keys may span partitions.
        `client` is the RPC pool unless given."""
        self.check_open()
        with translated(operation):
            return await self.scripts.run_pipelined(client or self.rpc, script, calls)

    async def read_pipelined(
        self, operation: str, commands: Sequence[Sequence[ArgValue]]
    ) -> list[Any]:
        """Plain commands in one pipeline, not a transaction: keys may lie in several partitions."""
        self.check_open()
        with translated(operation):
            async with self.rpc.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                replies: list[Any] = await pipe.execute()
        return replies


def _plain(client: StoreClient) -> Redis:
    assert isinstance(client, Redis)  # only a cluster URL builds a cluster client
    return client
