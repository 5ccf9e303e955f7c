"""The connection pools of one Redis topology (single server, Sentinel, Cluster).

`Connector` builds every pool (or cluster client) the store uses for the
target a `--redis-url` names (store/redis/urls.py): on Sentinel each pool
asks the sentinels for the primary on every new connection, so all of them
follow a failover; on Cluster it is redis-py's asyncio cluster client, which
follows MOVED and ASK and re-reads the slot map after one.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import ClusterDownError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError

from store.redis.packing import packed
from store.redis.urls import ClusterTarget, SentinelTarget, SingleServer, parse_redis_url


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """A SentinelConnectionPool that waits for a free connection instead of failing.

    SentinelConnectionPool finds the primary and drops connections to a
    demoted one; BlockingConnectionPool queues a burst of calls (the RPC
    pool's contract, store/redis_store.py). Sentinel's methods come first
    in the MRO and call through to the blocking pool's.
    """

    def __init__(self, master: str, sentinel: Sentinel, **kwargs: Any) -> None:
        super().__init__(master, sentinel, **kwargs)  # type: ignore[no-untyped-call]

    async def follow(self, address: tuple[str, int]) -> bool:
        """Record the primary's address; on a change drop the idle connections. True if it moved."""
        previous, self.master_address = self.master_address, address
        if previous == address:
            return False
        await self.disconnect(inuse_connections=False)
        return previous is not None  # a pool that never connected did not move

    async def release(self, connection: AbstractConnection) -> None:
        # A connection that was busy when the primary moved is dropped as it
        # comes back, so no later call runs on a demoted (or, during a manual
        # failover, a not-yet-demoted) primary. redis-py's sync pool does this
        # through owns_connection; its asyncio pool does not.
        address = self.master_address
        host, port = getattr(connection, "host", None), getattr(connection, "port", None)
        if address is not None and (host, port) != tuple(address):
            await connection.disconnect()
        await super().release(connection)


# A cluster client's pool per node may hold this many connections beyond the
# callers it admits at once: a pipeline (queue_depths) or a command sent to
# every primary (SCRIPT LOAD) takes one per node outside that count.
_CLUSTER_SPARE_CONNECTIONS = 4


class BoundedCluster(RedisCluster):
    """redis-py's asyncio cluster client, made to behave like the store's single-server pools.

    - Callers queue (up to `wait_timeout`) for one of `connections` slots, as on
      a BlockingConnectionPool: a node's pool would otherwise refuse a burst
      with MaxConnectionsError.
    - A timeout is never resent (as on one server: a claim whose outcome is
      unknown is released by the store instead); a refused connection, a
      CLUSTERDOWN or an uncovered slot is, after the slot map is re-read.
    """

    ERRORS_ALLOW_RETRY = (RedisConnectionError, ClusterDownError, SlotNotCoveredError)  # type: ignore[assignment]

    def __init__(self, *, connections: int, wait_timeout: float, **kwargs: Any) -> None:
        super().__init__(max_connections=connections + _CLUSTER_SPARE_CONNECTIONS, **kwargs)
        # Every node, known now or found later, makes connections that pack in C
        # (the nodes manager builds new nodes from these kwargs).
        kwargs_of_nodes = self.nodes_manager.connection_kwargs
        kwargs_of_nodes["connection_class"] = packed(kwargs_of_nodes["connection_class"])
        for node in self.nodes_manager.startup_nodes.values():
            node.connection_class = packed(node.connection_class)
        self._admitted = asyncio.Semaphore(connections)
        self._wait_timeout = wait_timeout

    async def aclose(self) -> None:
        """Re-read the slot map before the next call, without cutting calls in flight.

        redis-py calls aclose() itself on CLUSTERDOWN, an uncovered slot and
        every fifth MOVED, only to force that re-read; its own version
        disconnects every connection, including those other calls are
        sending on, which then fail with AttributeError (INTERNAL) or a
        spurious connection error. Here idle connections are dropped and
        busy ones are dropped when they come back. `close_all()` closes.
        """
        self._initialize = True
        await self._drop_idle_connections()

    async def initialize(
        self,
        additional_startup_nodes_info: list[tuple[str, int]] | None = None,
        last_failed_node_name: str | None = None,
    ) -> BoundedCluster:
        """redis-py's initialize(), except that a failed re-read of the slot map (nodes
        that disagree mid-failover, none reachable) drops idle connections only:
        redis-py's closes every one, cutting calls in flight as aclose() did."""
        if not self._initialize:
            return self
        if not self._lock:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._initialize:
                try:
                    await self.nodes_manager.initialize(
                        additional_startup_nodes_info=additional_startup_nodes_info,
                        last_failed_node_name=last_failed_node_name,
                    )
                    await self.commands_parser.initialize(self.nodes_manager.default_node)
                    self._initialize = False
                except BaseException:
                    await self._drop_idle_connections()
                    raise
        return self

    async def _drop_idle_connections(self) -> None:
        for node in list(self.nodes_manager.nodes_cache.values()):
            node.update_active_connections_for_reconnect()
            # Out of the free list while they close, so no call picks one up
            # half closed (redis-py's disconnect_free_connections leaves them in).
            idle = list(node._free)
            node._free.clear()
            await asyncio.gather(*(c.disconnect() for c in idle), return_exceptions=True)
            node._free.extend(idle)

    async def close_all(self) -> None:
        """Close every connection (the store is closing)."""
        self._initialize = True
        await self.nodes_manager.aclose()
        await self.nodes_manager.aclose("startup_nodes")

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._admitted.locked():
            try:
                await asyncio.wait_for(self._admitted.acquire(), self._wait_timeout)
            except TimeoutError:
                raise RedisConnectionError("no connection to the cluster available") from None
        else:
            await self._admitted.acquire()
        try:
            try:
                return await super().execute_command(*args, **kwargs)
            except AttributeError as error:
                if not _closed_under_us(error):
                    raise
            # As after any broken connection: sent again once (operation keys make a
            # script's resend answer its first run's outcome).
            try:
                return await super().execute_command(*args, **kwargs)
            except AttributeError as error:
                if not _closed_under_us(error):
                    raise
                raise RedisConnectionError("connection closed while sending") from error
        finally:
            self._admitted.release()


def _closed_under_us(error: AttributeError) -> bool:
    """True for redis-py sending on a connection another task closed meanwhile.

    On a connection error redis-py's cluster client closes a node's idle
    connections while they stay in its free list; a call that picked one up
    in that instant writes to a writer that is now None.
    """
    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1].filename if frames else ""
    return "'NoneType'" in str(error) and last.endswith(("redis/asyncio/connection.py",))


StoreClient = Redis | BoundedCluster


class Connector:
    """Builds the store's connection pools (or cluster clients) for one parsed URL."""

    def __init__(self, url: str, socket_timeout: float, connect_timeout: float) -> None:
        self.target = parse_redis_url(url)
        self._url = url
        self._wait_timeout = socket_timeout
        self._connect_timeout = connect_timeout
        self._sentinel: Sentinel | None = None
        self._sentinel_pools: list[BlockingSentinelPool] = []
        if isinstance(self.target, SentinelTarget):
            # Sentinel queries get the same short timeouts and no retries of
            # their own: a dead sentinel costs one connect attempt, then the
            # next one is asked (redis-py walks the list).
            self._sentinel = Sentinel(  # type: ignore[no-untyped-call]
                list(self.target.sentinels),
                sentinel_kwargs={
                    "socket_timeout": socket_timeout,
                    "socket_connect_timeout": connect_timeout,
                    "retry": Retry(NoBackoff(), 0),
                },
            )

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.target, ClusterTarget)

    def client(
        self, socket_timeout: float | None, connect_timeout: float, retries: int, connections: int
    ) -> StoreClient:
        """A client of the topology: one blocking pool, or a cluster client.

        One retry on a broken connection: a pooled connection may be stale
        after a Redis restart (on Cluster: the retry runs after the slot map
        is re-read, so it reaches a promoted replica). Timeouts are never retried.
        """
        retry = Retry(NoBackoff(), retries, supported_errors=(RedisConnectionError,))
        target = self.target
        if isinstance(target, ClusterTarget):
            return BoundedCluster(
                startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
                connections=connections,
                wait_timeout=self._wait_timeout,
                username=target.username,
                password=target.password,
                socket_timeout=socket_timeout,
                socket_connect_timeout=connect_timeout,
                retry=retry,
                # Only the partition's slot matters to a store: a client stricter than the
                # server would refuse everything while one unrelated shard is down.
                require_full_coverage=False,
            )
        pool = self.pool(
            max_connections=connections,
            timeout=self._wait_timeout,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=retry,
        )
        return Redis.from_pool(pool)

    def node_client(self, host: str, port: int, socket_timeout: float) -> Redis:
        """A plain client of one cluster node (pub/sub: the cluster client has no async one
        that reconnects the way Notifier needs)."""
        target = self.target
        assert isinstance(target, ClusterTarget)
        return Redis(
            host=host,
            port=port,
            username=target.username,
            password=target.password,
            socket_timeout=socket_timeout,
            socket_connect_timeout=self._connect_timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def pool(self, **kwargs: Any) -> ConnectionPool:
        """A blocking pool to the server or to the current primary."""
        target = self.target
        if isinstance(target, ClusterTarget):
            raise TypeError("a Redis Cluster has no single pool: use client()")
        pool: ConnectionPool
        if isinstance(target, SingleServer):
            pool = BlockingConnectionPool.from_url(self._url, **kwargs)
        else:
            assert self._sentinel is not None  # built with the target in __init__
            pool = BlockingSentinelPool(
                target.master,
                self._sentinel,
                db=target.db,
                username=target.username,
                password=target.password,
                **kwargs,
            )
            self._sentinel_pools.append(pool)
        # No connection is made yet: every one the pool makes packs in C.
        pool.connection_class = packed(pool.connection_class)
        return pool

    @property
    def follows_primary(self) -> bool:
        """True when the primary may move (Sentinel) and `follow()` should run."""
        return self._sentinel is not None

    async def follow(self) -> tuple[str, int] | None:
        """Ask the sentinels where the primary is now and point every pool there.

        Pools only ask when they open a connection; this also catches a
        primary that moved while their connections stayed up (a manual
        failover, a healed partition), which otherwise keep writing to the
        old primary until it is demoted, and those writes are then lost.
        The new primary's address if it moved, else None. Raises redis
        errors (no primary known yet, no sentinel answers).
        """
        if self._sentinel is None or not isinstance(self.target, SentinelTarget):
            return None
        host, port = await self._sentinel.discover_master(self.target.master)
        primary = (str(host), int(port))
        moved = False
        for pool in self._sentinel_pools:
            moved = await pool.follow(primary) or moved
        return primary if moved else None

    async def aclose(self) -> None:
        if self._sentinel is not None:
            await self._sentinel.aclose()
