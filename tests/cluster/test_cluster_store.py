"""RedisStore over redis+cluster://: scripts on every primary, config checks, sharded
notifications from each slot's owner (followed through a slot move), queued bursts,
failover followed, cluster errors mapped."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection as RedisConnection
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    MasterDownError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from store import (
    Store,
    StoreMisconfigured,
    StoreSettings,
    StoreUnavailable,
    open_store,
)
from store.errors import StoreError
from store.keys import Keys
from store.model import Job, JobSpec, SubmitRequest
from store.redis import RedisStore
from store.redis import engine as redis_engine
from store.redis.connection import POOL_CONNECTIONS
from store.redis.connection import translated as _translated
from store.redis.packing import HiredisPacking
from store.redis.partition import Partition
from store.redis.pools import BoundedCluster, Connector
from store.redis.scripts import read_script, script_names
from tests.cluster_servers import ClusterDeployment, SlotMigration
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.store.scenarios import (
    assert_a_waiting_claim_is_woken,
    assert_a_watch_sees_every_transition,
)
from tests.timings import Timings

pytestmark = pytest.mark.redis

TENANT = "acme"
MODEL = "llm-small"
RECOVERY_BOUND = 30.0


async def submit(store: Store | Partition) -> Job:
    request = SubmitRequest(tenant=TENANT, work=JobSpec(model=MODEL, payload=b"input"))
    return (await store.submit(request)).job


def partition_on(cluster: ClusterDeployment, node: RedisServer) -> str:
    """A fresh partition name whose slot `node` serves."""
    while True:
        partition = uuid.uuid4().hex[:10]
        if cluster.owner(cluster.slot_of(Keys(partition).notify)) is node:
            return partition


@pytest.fixture
async def cluster_store(shared_cluster: ClusterDeployment) -> AsyncIterator[Store]:
    store = open_store(shared_cluster.url, StoreSettings(), partition=uuid.uuid4().hex[:10])
    await store.open()
    yield store
    await store.close()


async def test_open_loads_every_script_on_every_primary(
    shared_cluster: ClusterDeployment, cluster_store: Store
) -> None:
    shas = [read_script(name, sharded=True).sha for name in script_names()]
    for node in shared_cluster.primaries():
        with shared_cluster.client(node) as client:
            assert all(client.script_exists(*shas)), f"scripts missing on {node.port}"


async def test_every_cluster_node_connection_packs_commands_with_hiredis(
    cluster_store: Store,
) -> None:
    await submit(cluster_store)
    assert isinstance(cluster_store, RedisStore)
    client = cluster_store.engine.connection.rpc
    assert isinstance(client, BoundedCluster)
    nodes = list(client.nodes_manager.nodes_cache.values())
    assert nodes and all(issubclass(node.connection_class, HiredisPacking) for node in nodes)


async def test_a_primary_that_lost_its_scripts_gets_them_again(
    shared_cluster: ClusterDeployment,
) -> None:
    owner = shared_cluster.primaries()[0]
    store = open_store(shared_cluster.url, StoreSettings(), partition_on(shared_cluster, owner))
    await store.open()
    try:
        with shared_cluster.client(owner) as client:
            client.script_flush()
        # NOSCRIPT, then SCRIPT LOAD and the call again: as a promoted replica would need.
        job = await submit(store)
        assert (await store.get(TENANT, job.id)).id == job.id
    finally:
        await store.close()


async def test_open_refuses_an_evicting_policy_on_any_primary(
    shared_cluster: ClusterDeployment,
) -> None:
    # Not the partition's master: a migration could bring the slot there.
    evicting = shared_cluster.primaries()[-1]
    others = [node for node in shared_cluster.primaries() if node is not evicting]
    partition = partition_on(shared_cluster, others[0])
    evicting.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    store = open_store(shared_cluster.url, StoreSettings(), partition=partition)
    try:
        with pytest.raises(StoreMisconfigured, match=f"'allkeys-lru' on 127.0.0.1:{evicting.port}"):
            await store.open()
    finally:
        await store.close()
        evicting.command("CONFIG", "SET", "maxmemory-policy", "noeviction")


async def test_open_warns_and_serves_when_config_is_refused(
    shared_cluster: ClusterDeployment, caplog: pytest.LogCaptureFixture
) -> None:
    # A user without CONFIG (as on managed Redis); its password comes from the URL.
    user = f"u{uuid.uuid4().hex[:8]}"
    for node in shared_cluster.alive:
        with shared_cluster.client(node) as client:
            client.acl_setuser(
                user, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                commands=["+@all", "-config"],
            )  # fmt: skip
    url = shared_cluster.url.replace("redis+cluster://", f"redis+cluster://{user}:pw@")
    store = open_store(url, StoreSettings(), partition=uuid.uuid4().hex[:10])
    try:
        with caplog.at_level(logging.WARNING, logger="store.redis"):
            await store.open()
        assert "cannot read the Redis config" in caplog.text
        job = await submit(store)
        assert (await store.get(TENANT, job.id)).id == job.id
    finally:
        await store.close()
        for node in shared_cluster.alive:
            with shared_cluster.client(node) as client:
                client.acl_deluser(user)


def shard_subscribers(cluster: ClusterDeployment, node: RedisServer, channel: str) -> int:
    """Sharded subscriptions to `channel` on `node` (PUBSUB SHARDNUMSUB)."""
    with cluster.client(node) as client:
        reply = client.execute_command("PUBSUB", "SHARDNUMSUB", channel)
    return int(reply[1])


async def wait_claiming(store: Store, model: str) -> None:
    await assert_eventually(
        lambda: asyncio.sleep(0, store.waiting_claims(model) == 1),  # type: ignore[attr-defined]
        timeout=5,
    )


async def test_notifications_are_subscribed_sharded_on_the_owner_of_the_channel_slot(
    shared_cluster: ClusterDeployment,
) -> None:
    owner = shared_cluster.primaries()[1]
    partition = partition_on(shared_cluster, owner)
    store = open_store(shared_cluster.url, StoreSettings(), partition=partition)
    await store.open()
    try:
        assert shard_subscribers(shared_cluster, owner, Keys(partition).notify) == 1
        with shared_cluster.client(owner) as client:
            [(_, plain)] = client.pubsub_numsub(Keys(partition).notify)
        assert plain == 0
    finally:
        await store.close()


@pytest.mark.parametrize(("hear_changes", "changes_subscribers"), [(False, 0), (True, 1)])
async def test_a_store_subscribes_sharded_to_the_channels_it_hears(
    shared_cluster: ClusterDeployment, hear_changes: bool, changes_subscribers: int
) -> None:
    owner = shared_cluster.primaries()[1]
    partition = partition_on(shared_cluster, owner)
    keys = Keys(partition)
    store = open_store(
        shared_cluster.url, StoreSettings(), partition=partition, hear_changes=hear_changes
    )
    await store.open()
    try:
        assert shard_subscribers(shared_cluster, owner, keys.notify) == 1
        assert shard_subscribers(shared_cluster, owner, keys.changes) == changes_subscribers
    finally:
        await store.close()


@pytest.mark.parametrize("hear_changes", [True, False], ids=["all", "ready only"])
async def test_a_waiting_claim_is_woken_by_a_submit_on_another_store(
    shared_cluster: ClusterDeployment, hear_changes: bool, timings: Timings
) -> None:
    partition = uuid.uuid4().hex[:10]
    waiter = open_store(
        shared_cluster.url, StoreSettings(), partition=partition, hear_changes=hear_changes
    )
    submitter = open_store(shared_cluster.url, StoreSettings(), partition=partition)
    await waiter.open()
    await submitter.open()
    try:
        await assert_a_waiting_claim_is_woken(
            waiter, lambda: submit(submitter), timings, "Cluster, another store"
        )
    finally:
        await waiter.close()
        await submitter.close()


async def test_a_watch_sees_every_transition_a_store_not_hearing_changes_makes(
    shared_cluster: ClusterDeployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_engine, "SAFETY_RECHECK", 600.0)  # wake-ups only
    partition = uuid.uuid4().hex[:10]
    gateway_side = open_store(shared_cluster.url, StoreSettings(), partition=partition)
    worker_side = open_store(
        shared_cluster.url, StoreSettings(), partition=partition, hear_changes=False
    )
    await gateway_side.open()
    await worker_side.open()
    try:
        await assert_a_watch_sees_every_transition(gateway_side, worker_side)
    finally:
        await gateway_side.close()
        await worker_side.close()


async def test_a_submit_publishes_on_its_shard_only(shared_cluster: ClusterDeployment) -> None:
    # SPUBLISH: a plain SUBSCRIBE, on the owner or on any other node, hears nothing
    # (a PUBLISH would reach both); a sharded one on the owner hears the submit.
    owner = shared_cluster.primaries()[1]
    other = shared_cluster.primaries()[0]
    partition = partition_on(shared_cluster, owner)
    channels = (Keys(partition).notify, Keys(partition).changes)
    store = open_store(shared_cluster.url, StoreSettings(), partition=partition)
    await store.open()
    plain = [subscriber_on(node) for node in (owner, other)]
    sharded = subscriber_on(owner)
    try:
        for subscriber in plain:
            subscriber.subscribe(*channels)
        for channel in channels:
            sharded.ssubscribe(channel)
        job = await submit(store)
        heard = published(sharded, "smessage", until=f"r {MODEL} {job.id}")
        # a submit says only "r": nobody can be watching a job just made
        assert heard == [f"r {MODEL} {job.id}".encode()]
        # the sharded subscriber has heard the submit, so a PUBLISH would be here by now
        for subscriber in plain:
            assert published(subscriber, "message") == []
    finally:
        for subscriber in (*plain, sharded):
            subscriber.close()
        await store.close()


def bus_publishes(cluster: ClusterDeployment) -> int:
    """PUBLISH messages the nodes sent each other over the cluster bus, so far."""
    sent = 0
    for node in cluster.alive:
        with cluster.client(node) as client:
            info = client.execute_command("CLUSTER", "INFO")
        for line in info.splitlines():
            if line.startswith("cluster_stats_messages_publish_sent:"):
                sent += int(line.split(":", 1)[1])
    return sent


async def test_a_submit_sends_no_publish_over_the_cluster_bus(
    shared_cluster: ClusterDeployment, cluster_store: Store
) -> None:
    # A PUBLISH goes to every other node (2 here, per message); an SPUBLISH only
    # to the shard's replicas (none here).
    before = bus_publishes(shared_cluster)
    await submit(cluster_store)
    assert bus_publishes(shared_cluster) == before


def subscriber_on(node: RedisServer) -> Any:
    return redis.Redis(port=node.port, socket_timeout=5).pubsub()  # type: ignore[no-untyped-call]


def published(subscriber: Any, kind: str, until: str = "") -> list[bytes]:
    """The `kind` messages `subscriber` gets, up to one reading `until` (without `until`:
    those that arrive before 0.3 s of silence; a broadcast PUBLISH crosses the cluster
    bus in milliseconds)."""
    heard: list[bytes] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        message = subscriber.get_message(timeout=0.5 if until else 0.3)
        if message is None:
            if not until:
                break
            continue
        if message["type"] == kind:
            heard.append(message["data"])
            if message["data"] == until.encode():
                break
    return heard


async def test_a_partitioned_store_subscribes_once_on_each_master_serving_a_partition(
    shared_cluster: ClusterDeployment,
) -> None:
    store = open_store(
        shared_cluster.url, StoreSettings(), partition=uuid.uuid4().hex[:10], partitions=16
    )
    assert isinstance(store, RedisStore)
    await store.open()
    try:
        owners = {
            part.keys.notify: shared_cluster.owner(shared_cluster.slot_of(part.keys.notify))
            for part in store.engine.parts
        }
        assert len(set(owners.values())) == 3, "16 partitions over 3 masters"
        for channel, owner in owners.items():
            assert shard_subscribers(shared_cluster, owner, channel) == 1
        ports = [s.pubsub.connection.port for s in store.engine.connection.notifier.subscriptions]
        assert sorted(ports) == sorted(node.port for node in set(owners.values()))
    finally:
        await store.close()


async def test_a_claim_waiting_on_a_partition_of_another_master_is_woken_by_its_submit(
    shared_cluster: ClusterDeployment, timings: Timings
) -> None:
    # The claim listens on every partition; the submit lands in one whose slot is
    # on another master than partition 0's (the old single subscription's node).
    partition = uuid.uuid4().hex[:10]
    waiter = open_store(shared_cluster.url, StoreSettings(), partition=partition, partitions=8)
    submitter = open_store(shared_cluster.url, StoreSettings(), partition=partition, partitions=8)
    assert isinstance(waiter, RedisStore)
    assert isinstance(submitter, RedisStore)
    await waiter.open()
    await submitter.open()
    try:
        first = shared_cluster.owner(shared_cluster.slot_of(waiter.engine.parts[0].keys.notify))
        target = next(
            part
            for part in submitter.engine.parts
            if shared_cluster.owner(shared_cluster.slot_of(part.keys.notify)) is not first
        )
        await assert_a_waiting_claim_is_woken(
            waiter, lambda: submit(target), timings, "Cluster, another master's partition"
        )
    finally:
        await waiter.close()
        await submitter.close()


async def test_a_migrated_partition_slot_is_subscribed_again_on_its_new_master(
    own_cluster: ClusterDeployment, timings: Timings
) -> None:
    cluster = own_cluster
    owner, target = cluster.primaries()[0], cluster.primaries()[1]
    partition = partition_on(cluster, owner)
    channel = Keys(partition).notify
    store = open_store(cluster.url, StoreSettings(), partition=partition)
    await store.open()
    try:
        await submit(store)
        migration = SlotMigration(cluster, cluster.slot_of(channel), target)
        await asyncio.to_thread(migration.begin)
        await asyncio.to_thread(migration.finish)
        # Redis sent the subscription a sunsubscribe; the notifier re-locates the slot

        async def subscribed_on_target() -> bool:
            return shard_subscribers(cluster, target, channel) == 1

        await assert_eventually(subscribed_on_target, timeout=RECOVERY_BOUND, interval=0.1)
        await assert_eventually(
            lambda: asyncio.sleep(0, not store.engine.connection.notifier._error),  # type: ignore[attr-defined]
            timeout=RECOVERY_BOUND,
        )
        claim = asyncio.create_task(store.claim("w1", ["other"], wait=timedelta(seconds=20)))
        await wait_claiming(store, "other")
        request = SubmitRequest(tenant=TENANT, work=JobSpec(model="other", payload=b"x"))
        woken_at = time.monotonic()
        other = (await store.submit(request)).job
        [claimed] = await asyncio.wait_for(claim, 10)
        assert claimed.job.id == other.id
        woken = time.monotonic() - woken_at
        timings("wake-up: a waiting claim answers a new job", woken, "Cluster, slot migrated")
    finally:
        await store.close()


async def test_a_burst_beyond_the_pool_queues_instead_of_failing(cluster_store: Store) -> None:
    job = await submit(cluster_store)
    reads = [cluster_store.get(TENANT, job.id) for _ in range(POOL_CONNECTIONS * 3)]
    jobs = await asyncio.gather(*reads)
    assert {read.id for read in jobs} == {job.id}


async def test_open_fails_unavailable_when_no_node_answers() -> None:
    store = open_store("redis+cluster://127.0.0.1:1,127.0.0.1:2", StoreSettings())
    try:
        with pytest.raises(StoreUnavailable):
            await store.open()
    finally:
        await store.close()


@pytest.mark.parametrize(
    "error",
    [
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        MasterDownError("MASTERDOWN Link with MASTER is down"),
        TryAgainError("Multiple keys request during rehashing of slot"),
        ClusterError("TTL exhausted."),
        SlotNotCoveredError("Slot 12 is not covered by the cluster."),
        RedisClusterException("Redis Cluster cannot be connected. Please provide ..."),
        RedisClusterException("All slots are not covered after query all startup_nodes."),
        redis.ResponseError("CLUSTERDOWN Hash slot not served"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_cluster_errors_are_store_unavailable(error: Exception) -> None:
    with pytest.raises(StoreUnavailable), _translated("submit"):
        raise error


def test_a_cross_slot_call_is_a_bug_not_unavailability() -> None:
    with pytest.raises(StoreError) as raised, _translated("submit"):
        raise RedisClusterException("EVALSHA - all keys must map to the same key slot")
    assert not isinstance(raised.value, StoreUnavailable)


async def test_a_failover_of_the_partition_master_is_followed(
    replicated_cluster: ClusterDeployment, timings: Timings
) -> None:
    cluster = replicated_cluster
    owner = cluster.primaries()[0]
    partition = partition_on(cluster, owner)
    store = open_store(cluster.url, StoreSettings(), partition=partition)
    await store.open()
    try:
        job = await submit(store)
        # Replication is asynchronous: without this the replica may be promoted
        # without the job (what a failover can lose is docs/sentinel.md's subject,
        # not this test's).
        with cluster.client(owner) as client:
            assert client.wait(1, 5000) == 1
        cluster.kill(owner)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await submit(store)
        failed = time.monotonic() - started
        timings("store down: call fails", failed, "Cluster partition master killed")

        async def served() -> bool:
            try:
                await store.get(TENANT, job.id)
            except StoreUnavailable:
                return False
            return True

        await assert_eventually(served, timeout=RECOVERY_BOUND, interval=0.1)

        # The notifier followed too: subscribed on the new master, a waiting claim is
        # woken through it.
        async def subscribed_on_new_owner() -> bool:
            channel = Keys(partition).notify
            try:
                owner_now = cluster.owner(cluster.slot_of(channel))
                return bool(shard_subscribers(cluster, owner_now, channel))
            except redis.ConnectionError:  # a node still names the dead master
                return False

        await assert_eventually(subscribed_on_new_owner, timeout=RECOVERY_BOUND, interval=0.1)
        claim = asyncio.create_task(store.claim("w1", ["other"], wait=timedelta(seconds=20)))
        await wait_claiming(store, "other")
        request = SubmitRequest(tenant=TENANT, work=JobSpec(model="other", payload=b"x"))
        woken_at = time.monotonic()
        other = (await store.submit(request)).job
        [claimed] = await asyncio.wait_for(claim, 10)
        assert claimed.job.id == other.id
        woken = time.monotonic() - woken_at
        timings("wake-up: a waiting claim answers a new job", woken, "Cluster, after a failover")
    finally:
        await store.close()


async def test_a_partition_master_dying_fails_waiting_claims_until_its_replica_serves(
    replicated_cluster: ClusterDeployment, timings: Timings
) -> None:
    # The dead master is not partition 0's: its subscription is one of several,
    # and while it is down the claim (listening on every partition) may miss a
    # wake-up, so it fails UNAVAILABLE rather than wait silently.
    cluster = replicated_cluster
    store = open_store(cluster.url, StoreSettings(), partition=uuid.uuid4().hex[:10], partitions=8)
    assert isinstance(store, RedisStore)
    await store.open()
    try:
        first = cluster.owner(cluster.slot_of(store.engine.parts[0].keys.notify))
        victim_part = next(
            part
            for part in store.engine.parts
            if cluster.owner(cluster.slot_of(part.keys.notify)) is not first
        )
        victim = cluster.owner(cluster.slot_of(victim_part.keys.notify))
        claim = asyncio.create_task(store.claim("w1", [MODEL], wait=timedelta(seconds=20)))
        await wait_claiming(store, MODEL)
        started = time.monotonic()
        cluster.kill(victim)
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(claim, 10)
        failed = time.monotonic() - started
        timings("store down: call fails", failed, "Cluster, a waiting claim's master killed")

        async def notifications_back() -> bool:
            return store.engine.connection.notifier._error is None

        await assert_eventually(notifications_back, timeout=RECOVERY_BOUND, interval=0.1)
        claim = asyncio.create_task(store.claim("w1", [MODEL], wait=timedelta(seconds=20)))
        await wait_claiming(store, MODEL)
        woken_at = time.monotonic()
        job = await submit(victim_part)
        [claimed] = await asyncio.wait_for(claim, 10)
        assert claimed.job.id == job.id
        woken = time.monotonic() - woken_at
        timings("wake-up: a waiting claim answers a new job", woken, "Cluster, via the replica")
    finally:
        await store.close()


async def test_ping_asks_the_master_of_the_partition(shared_cluster: ClusterDeployment) -> None:
    owner = shared_cluster.primaries()[2]
    store = open_store(shared_cluster.url, StoreSettings(), partition_on(shared_cluster, owner))
    await store.open()
    try:
        with shared_cluster.client(owner) as client:
            before = int(client.info("commandstats")["cmdstat_exists"]["calls"])
            await store.ping()
            after = int(client.info("commandstats")["cmdstat_exists"]["calls"])
        assert after == before + 1
    finally:
        await store.close()


async def test_a_slot_map_refresh_forced_by_redis_py_never_breaks_calls_in_flight(
    shared_cluster: ClusterDeployment,
) -> None:
    # redis-py calls aclose() itself on CLUSTERDOWN and every fifth MOVED; its own
    # version cut the connections other calls were sending on (AttributeError:
    # INTERNAL, seen in the failover test). Here calls in flight finish normally.
    client = Connector(shared_cluster.url, 1.0, 0.5).client(1.0, 0.5, retries=1, connections=64)
    assert isinstance(client, BoundedCluster)
    outcomes: Counter[str] = Counter()

    async def get() -> None:
        try:
            await client.get("{race}key")
            outcomes["ok"] += 1
        except Exception as error:
            outcomes[type(error).__name__] += 1

    try:
        await client.set("{race}key", "v")
        for round_number in range(60):
            calls = [asyncio.create_task(get()) for _ in range(50)]
            for _ in range(round_number % 6):  # reach the calls at every stage of sending
                await asyncio.sleep(0)
            await client.aclose()
            await asyncio.gather(*calls)
    finally:
        await client.close_all()
    assert outcomes == Counter(ok=60 * 50)


async def test_a_send_on_a_connection_closed_under_it_is_sent_again(
    shared_cluster: ClusterDeployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py closes a node's idle connections after a connection error while
    # they stay in its free list; a call that took one writes to a None writer
    # (AttributeError, which the failover test saw as INTERNAL).
    send = ClusterNode.execute_command
    failures = [1]

    async def closed_once(node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        if failures:
            failures.pop()
            await RedisConnection()._send_packed_command([b"PING\r\n"])  # writer is None
        return await send(node, *args, **kwargs)

    client = Connector(shared_cluster.url, 1.0, 0.5).client(1.0, 0.5, retries=1, connections=8)
    assert isinstance(client, BoundedCluster)
    try:
        await client.set("{closed}key", "v")
        monkeypatch.setattr(ClusterNode, "execute_command", closed_once)
        assert await client.get("{closed}key") == b"v"
        assert not failures
    finally:
        await client.close_all()
