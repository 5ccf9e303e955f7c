"""RedisStore behaviour that only Redis has: persistence, failures, OOM, layout, cost.

The shared semantics are in test_contract_*.py (both backends); these tests
run on a real redis-server only, most on a private one (`own_redis`) they may
stop, kill, flush or starve of memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import signal
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from store import (
    QueueFull,
    StoreError,
    StoreMisconfigured,
    StoreSettings,
    StoreUnavailable,
)
from store.model import GroupSpec, Job, JobSpec, JobStatus, SubmitRequest
from store.redis import RedisStore
from store.redis import connection as redis_connection
from store.redis.connection import POOL_CONNECTIONS
from store.redis.scripts import Script
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer, free_port
from tests.store.scenarios import assert_a_watch_sees_every_transition
from tests.timings import Timings

pytestmark = pytest.mark.redis

TENANT = "acme"
MODEL = "llm-small"
LIVE = -1  # PTTL of a key without expiry
StoreFactory = Callable[..., Awaitable[RedisStore]]


def request(payload: bytes = b"input", key: str = "") -> SubmitRequest:
    return SubmitRequest(TENANT, JobSpec(MODEL, payload), idempotency_key=key)


def group_request(size: int, max_parallel: int = 0) -> SubmitRequest:
    children = tuple(JobSpec(MODEL, f"child {i}".encode()) for i in range(size))
    return SubmitRequest(TENANT, GroupSpec(children, max_parallel=max_parallel))


@pytest.fixture
def server(own_redis: RedisServer) -> RedisServer:
    return own_redis


@pytest.fixture
async def raw(server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def make_store(server: RedisServer, partition: str) -> AsyncIterator[StoreFactory]:
    stores: list[RedisStore] = []

    async def make(url: str | None = None, **overrides: Any) -> RedisStore:
        store = RedisStore(url or server.url, StoreSettings(**overrides), partition=partition)
        await store.open()
        stores.append(store)
        return store

    yield make
    for store in stores:
        await store.close()


@pytest.fixture
async def store(make_store: StoreFactory) -> RedisStore:
    return await make_store()


async def eq(value: Awaitable[object], expected: object) -> bool:
    return await value == expected


async def info(raw: Redis, section: str) -> dict[str, Any]:
    result: dict[str, Any] = await raw.info(section)
    return result


async def claim_waiting(store: RedisStore) -> bool:
    """True once a claim on `store` found nothing and is blocked waiting."""
    return store.waiting_claims(MODEL) > 0


async def expired_leases(raw: Redis, store: RedisStore) -> int:
    """Leases past their deadline by Redis' clock (what recover() would handle)."""
    seconds, micros = await raw.time()
    return int(
        await raw.zcount(store.engine.owner.keys.leases, "-inf", seconds * 1000 + micros // 1000)
    )


#: A waiting claim's wait in the failure tests, and how long they give it to
#: fail: both far past any fail-fast, so only an empty answer or a hang fails
#: them. How fast it failed is handed to `timings` (the bench's bound).
LONG_WAIT = timedelta(seconds=60)
HANG = 30.0


async def measure_unavailable(
    store: RedisStore, call: Awaitable[object], stop: Callable[[], None]
) -> float:
    """Seconds from `stop()` until `call` (a waiting claim) raised StoreUnavailable."""
    task = asyncio.ensure_future(call)
    await assert_eventually(lambda: claim_waiting(store))
    started = time.monotonic()
    stop()
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(task, timeout=HANG)
    return time.monotonic() - started


# -- durability -------------------------------------------


async def test_a_redis_restart_with_appendonly_loses_no_job(
    store: RedisStore, server: RedisServer
) -> None:
    submitted = {(await store.submit(request(f"job {i}".encode()))).job.id for i in range(20)}
    server.restart()
    found = {(await store.get(TENANT, job_id)).id for job_id in submitted}
    claimed = await store.claim("w1", [MODEL], max_jobs=64)
    assert found == submitted
    assert {c.job.id for c in claimed} == submitted


# -- failures are loud (and short: the bench's bounds) ---------------------


async def test_stopped_redis_fails_a_waiting_claim(
    store: RedisStore, server: RedisServer, timings: Timings
) -> None:
    waiting = store.claim("w1", [MODEL], wait=LONG_WAIT)
    failed = await measure_unavailable(store, waiting, server.stop)
    timings("store down: call fails", failed, "RedisStore, stopped, a waiting claim")


async def test_killed_redis_fails_a_waiting_claim(
    store: RedisStore, server: RedisServer, timings: Timings
) -> None:
    waiting = store.claim("w1", [MODEL], wait=LONG_WAIT)
    failed = await measure_unavailable(store, waiting, server.kill)
    timings("store down: call fails", failed, "RedisStore, killed, a waiting claim")


def pause(server: RedisServer) -> None:
    """Freeze redis-server (SIGSTOP): sockets stay open but nothing answers."""
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)


def resume(server: RedisServer) -> None:
    assert server.process is not None
    server.process.send_signal(signal.SIGCONT)


async def test_a_hung_redis_fails_a_waiting_claim(
    store: RedisStore, server: RedisServer, timings: Timings
) -> None:
    waiting = store.claim("w1", [MODEL], wait=LONG_WAIT)
    try:
        failed = await measure_unavailable(store, waiting, lambda: pause(server))
    finally:
        resume(server)
    timings("store down: a hung Redis fails the call", failed, "RedisStore, a waiting claim")


async def test_a_hung_redis_fails_a_call_instead_of_hanging(
    store: RedisStore, server: RedisServer, timings: Timings
) -> None:
    job = (await store.submit(request())).job
    pause(server)
    started = time.monotonic()
    try:
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(store.get(TENANT, job.id), HANG)
    finally:
        resume(server)
    # The 1 s socket timeout; a hang would be unbounded.
    timings("store down: a hung Redis fails the call", time.monotonic() - started, "RedisStore Get")


@pytest.mark.parametrize("operation", ["get", "submit", "claim", "heartbeat"])
async def test_stopped_redis_is_store_unavailable(
    store: RedisStore, server: RedisServer, operation: str, timings: Timings
) -> None:
    job = (await store.submit(request())).job
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "get": lambda: store.get(TENANT, job.id),
        "submit": lambda: store.submit(request()),
        "claim": lambda: store.claim("w1", [MODEL]),
        "heartbeat": lambda: store.heartbeat(job.id, "lease", 0.5, ""),
    }
    server.stop()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(calls[operation](), HANG)
    timings(
        "store down: call fails", time.monotonic() - started, f"RedisStore, stopped, {operation}"
    )


async def test_a_stopped_redis_is_reported_as_a_failure_of_the_operation(
    store: RedisStore, server: RedisServer
) -> None:
    failed: list[str] = []
    store.on_failure = failed.append
    job = (await store.submit(request())).job
    server.stop()
    with pytest.raises(StoreUnavailable):
        await store.get(TENANT, job.id)
    assert failed == ["get"]


@pytest.mark.parametrize("serve_stale_data", ["yes", "no"])
async def test_a_redis_turned_replica_is_store_unavailable(
    store: RedisStore, raw: Redis, serve_stale_data: str
) -> None:
    # Mid-failover the old primary answers READONLY (writes) or MASTERDOWN
    # (everything, with replica-serve-stale-data no): "try again", never an
    # internal error.
    job = (await store.submit(request())).job
    await raw.config_set("replica-serve-stale-data", serve_stale_data)
    await raw.replicaof("127.0.0.1", free_port())
    try:
        with pytest.raises(StoreUnavailable):
            await store.submit(request())
        with pytest.raises(StoreUnavailable):
            await store.cancel(TENANT, job.id)
    finally:
        await raw.replicaof("NO", "ONE")


async def test_the_store_works_again_after_redis_returns(
    store: RedisStore, server: RedisServer
) -> None:
    job = (await store.submit(request())).job
    server.stop()
    with pytest.raises(StoreUnavailable):
        await store.get(TENANT, job.id)
    server.start()
    assert (await store.get(TENANT, job.id)).status is JobStatus.QUEUED
    assert [c.job.id for c in await store.claim("w1", [MODEL])] == [job.id]


async def test_waiting_claims_work_again_after_redis_returns(
    store: RedisStore, server: RedisServer, make_store: StoreFactory
) -> None:
    server.restart()

    async def claim_waits() -> bool:
        try:
            waiting = asyncio.ensure_future(store.claim("w1", [MODEL], wait=timedelta(seconds=5)))
            await assert_eventually(lambda: claim_waiting(store), timeout=2)
            await other.submit(request())
            return len(await asyncio.wait_for(waiting, 2)) == 1
        except StoreUnavailable:
            return False

    other = await make_store()
    assert await assert_eventually(claim_waits, timeout=10)


async def test_lost_notification_connection_fails_waiters(
    store: RedisStore, raw: Redis, timings: Timings
) -> None:
    waiting = asyncio.ensure_future(store.claim("w1", [MODEL], wait=LONG_WAIT))
    await assert_eventually(lambda: claim_waiting(store))
    started = time.monotonic()
    await raw.client_kill_filter(_type="pubsub")
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(waiting, HANG)
    failed = time.monotonic() - started
    timings("store down: call fails", failed, "RedisStore, notifications lost, a waiting claim")


async def test_scripts_are_reloaded_after_script_flush(store: RedisStore, raw: Redis) -> None:
    job = (await store.submit(request())).job
    await raw.script_flush()
    assert (await store.get(TENANT, job.id)).id == job.id
    assert (await store.submit(request())).job.status is JobStatus.QUEUED


# -- settings checked at open -------------------------------------------


async def test_a_script_redis_cannot_compile_fails_open(
    server: RedisServer, partition: str
) -> None:
    store = RedisStore(server.url, StoreSettings(), partition=partition)
    source = "return {"  # a Lua syntax error
    store.engine.connection.scripts._scripts["get"] = Script(
        "get", source, hashlib.sha1(source.encode()).hexdigest()
    )
    with pytest.raises(StoreError, match="get"):
        await store.open()
    await store.close()


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl", "allkeys-random"])
async def test_an_evicting_maxmemory_policy_is_refused_at_open(
    server: RedisServer, raw: Redis, partition: str, policy: str
) -> None:
    await raw.config_set("maxmemory-policy", policy)
    store = RedisStore(server.url, StoreSettings(), partition=partition)
    with pytest.raises(StoreMisconfigured):
        await store.open()
    await store.close()


async def test_persistence_off_is_logged_as_a_warning(
    redis_server: RedisServer, partition: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisStore(redis_server.url, StoreSettings(), partition=partition)
    with caplog.at_level(logging.WARNING, logger="store.redis"):
        await store.open()
    await store.close()
    assert any("persistence is off" in r.getMessage() for r in caplog.records)


async def test_appendonly_redis_opens_without_a_persistence_warning(
    make_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="store.redis"):
        await make_store()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_redis_without_config_access_warns_and_opens(
    server: RedisServer, raw: Redis, make_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    await raw.acl_setuser(
        "app",
        enabled=True,
        passwords=["+secret"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-config"],
    )
    url = f"redis://app:secret@127.0.0.1:{server.port}/0"
    with caplog.at_level(logging.WARNING, logger="store.redis"):
        store = await make_store(url)
    assert any("cannot read the Redis config" in r.getMessage() for r in caplog.records)
    assert (await store.submit(request())).job.status is JobStatus.QUEUED


# -- out of memory -------------------------------------------


async def starve(raw: Redis) -> None:
    """Set maxmemory just below what Redis uses now (noeviction stays)."""
    used = int((await info(raw, "memory"))["used_memory"])
    await raw.config_set("maxmemory", used - 1024)


async def test_out_of_memory_submit_is_queue_full(store: RedisStore, raw: Redis) -> None:
    await store.submit(request())
    await starve(raw)
    with pytest.raises(QueueFull):
        await store.submit(request())


async def test_out_of_memory_heartbeat_set_result_and_cancel_still_work(
    store: RedisStore, raw: Redis
) -> None:
    jobs = [(await store.submit(request())).job for _ in range(3)]
    first, second = await store.claim("w1", [MODEL], max_jobs=2)
    await starve(raw)
    beat = await store.heartbeat(first.job.id, first.lease_id, 0.5, "half")
    done = await store.set_result(first.job.id, first.lease_id, JobStatus.COMPLETED, b"out")
    running = await store.cancel(TENANT, second.job.id, "stop")
    queued = await store.cancel(TENANT, jobs[2].id, "stop")
    assert not beat.cancel_requested
    assert (done.status, done.result) == (JobStatus.COMPLETED, b"out")
    assert running.cancelled and queued.cancelled
    with pytest.raises(QueueFull):
        await store.submit(request())


async def test_out_of_memory_leadership_recovery_and_claim_still_work(
    make_store: StoreFactory, raw: Redis
) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=0.2))
    job = (await store.submit(request())).job
    await store.claim("w1", [MODEL])
    await starve(raw)
    assert await store.acquire_leadership("reaper", timedelta(seconds=5))

    async def requeued() -> bool:
        await store.recover()
        return (await store.get(TENANT, job.id)).status is JobStatus.QUEUED

    await assert_eventually(requeued)
    assert [c.job.id for c in await store.claim("w2", [MODEL])] == [job.id]


# -- key layout -------------------------------------------


async def test_every_key_of_a_partition_shares_one_hash_tag(
    make_store: StoreFactory, raw: Redis, partition: str
) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=0.1), result_ttl=timedelta(hours=1))
    await store.submit(request(key="k1"))
    await store.submit(group_request(3, max_parallel=1))
    claimed = await store.claim("w1", [MODEL], max_jobs=2)
    await store.set_result(claimed[0].job.id, claimed[0].lease_id, JobStatus.COMPLETED, b"r")
    await assert_eventually(store.recover)  # the other lease expires
    await store.acquire_leadership("me", timedelta(seconds=5))
    keys = [key.decode() async for key in raw.scan_iter(count=1000)]
    assert len(keys) > 10
    assert all(key.startswith(f"jobgate:{{{partition}}}:") for key in keys), keys


# -- recovery cost -------------------------------------------


async def test_recover_touches_only_what_expired(
    make_store: StoreFactory, server: RedisServer, raw: Redis
) -> None:
    patient = await make_store(lease_timeout=timedelta(seconds=300))
    hasty = await make_store(lease_timeout=timedelta(seconds=0.05))
    await patient.submit(group_request(1000))
    for _ in range(16):
        await patient.claim("w1", [MODEL], max_jobs=64)
    for _ in range(5):
        await patient.submit(request())
    await hasty.claim("w2", [MODEL], max_jobs=5)
    await assert_eventually(lambda: eq(expired_leases(raw, patient), 5))
    before = (await info(raw, "stats"))["total_commands_processed"]
    events = await patient.recover()
    commands = (await info(raw, "stats"))["total_commands_processed"] - before
    assert len(events) == 5
    assert commands < 300  # all commands, scripts' own included; scanning would be 1000+


async def test_leadership_recovery_and_ping_answer_while_the_rpc_pool_is_exhausted(
    make_store: StoreFactory,
) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=0.05))
    await store.submit(request())
    await store.claim("w1", [MODEL])
    client = store.engine.connection.rpc
    assert isinstance(client, Redis)  # one server here, not a cluster
    pool = client.connection_pool
    held = [await pool.get_connection() for _ in range(pool.max_connections)]  # type: ignore[no-untyped-call]
    try:
        with pytest.raises(StoreUnavailable):
            await store.get(TENANT, "01ARZ3NDEKTSV4RRFFQ69G5FAV")  # the RPC pool is exhausted
        assert await store.acquire_leadership("me", timedelta(seconds=5))
        events = await assert_eventually(store.recover)
        assert [event.to_status for event in events] == [JobStatus.QUEUED]
        await store.ping()
    finally:
        for connection in held:
            await pool.release(connection)


async def test_streams_and_long_polls_woken_together_never_exhaust_the_pool(
    make_store: StoreFactory, server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # about the pool's size, not failure detection: 100 claims opening their
    # connections at once took longer than the 0.5 s connect timeout on a
    # loaded CI machine, and a claim failed UNAVAILABLE instead of waiting
    monkeypatch.setattr(redis_connection, "CONNECT_TIMEOUT", 30.0)
    store = await make_store()
    other = await make_store()
    jobs = [(await store.submit(request())).job for _ in range(300)]
    watches = [store.watch(TENANT, job.id) for job in jobs]
    for watch in watches:
        await anext(watch)  # the first snapshot; each now waits on its queue's moves
    wait = timedelta(seconds=30)
    claims = [asyncio.ensure_future(store.claim(f"w{i}", ["idle"], wait=wait)) for i in range(100)]

    async def all_waiting() -> bool:
        return store.waiting_claims("idle") == 100

    await assert_eventually(all_waiting, timeout=30)
    await other.claim("w", [MODEL])  # the queue moves: every watch re-reads at once
    await other.submit(SubmitRequest(tenant=TENANT, work=JobSpec(model="idle")))
    moved = await asyncio.gather(*(anext(watch) for watch in watches))
    assert [job.queue_position for job in moved[1:]] == list(range(len(jobs) - 1))
    claimed = await asyncio.wait({*claims}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert len(claimed[0]) == 1 and not any(task.exception() for task in claimed[0])
    assert int(server.info_field("clients", "connected_clients")) < 2 * POOL_CONNECTIONS + 10
    for task in claims:
        task.cancel()
    for watch in watches:
        await cast(AsyncGenerator[Job, None], watch).aclose()


# -- TTL -------------------------------------------


async def pttls(raw: Redis, *keys: str) -> list[int]:
    return [int(await raw.pttl(key)) for key in keys]


async def test_live_job_keys_never_expire(store: RedisStore, raw: Redis) -> None:
    job = (await store.submit(request(key="k1"))).job
    claimed = (await store.claim("w1", [MODEL]))[0]
    await store.heartbeat(job.id, claimed.lease_id, 0.5, "")
    k = store.engine.owner.keys
    ttls = await pttls(raw, k.job(job.id), k.payload(job.id), k.idempotency(TENANT, "k1"))
    assert ttls == [LIVE, LIVE, LIVE]


async def test_terminal_job_keys_get_the_result_ttl(make_store: StoreFactory, raw: Redis) -> None:
    store = await make_store(result_ttl=timedelta(seconds=600))
    job = (await store.submit(request(key="k1"))).job
    claimed = (await store.claim("w1", [MODEL]))[0]
    await store.set_result(job.id, claimed.lease_id, JobStatus.COMPLETED, b"out")
    k = store.engine.owner.keys
    keys = [k.job(job.id), k.payload(job.id), k.result(job.id), k.idempotency(TENANT, "k1")]
    assert all(590_000 < ttl <= 600_000 for ttl in await pttls(raw, *keys))


async def test_group_children_expire_with_the_parent(make_store: StoreFactory, raw: Redis) -> None:
    store = await make_store(result_ttl=timedelta(seconds=600))
    group = (await store.submit(group_request(2))).job
    running = (await store.claim("w1", [MODEL]))[0]
    await store.cancel(TENANT, group.id)
    k = store.engine.owner.keys
    child_keys = [k.job(c.id) for c in group.children]
    assert await pttls(raw, k.job(group.id), *child_keys) == [LIVE, LIVE, LIVE]
    await store.set_result(running.job.id, running.lease_id, JobStatus.COMPLETED, b"kept")
    parent_ttl, *child_ttls = await pttls(raw, k.job(group.id), *child_keys)
    assert 590_000 < parent_ttl <= 600_000
    assert all(abs(ttl - parent_ttl) < 1000 for ttl in child_ttls)


# -- events -------------------------------------------


async def test_event_stream_is_capped_near_events_max_length(
    make_store: StoreFactory, raw: Redis
) -> None:
    store = await make_store(events_max_length=10)
    for _ in range(300):
        await store.submit(request())
    # MAXLEN ~ trims whole stream nodes (100 entries by default)
    assert await raw.xlen(store.engine.owner.keys.events) <= 10 + 100


# -- orphans -------------------------------------------


async def test_claim_drops_an_orphan_id_and_never_recreates_its_record(
    store: RedisStore, raw: Redis
) -> None:
    orphan = (await store.submit(request())).job
    job = (await store.submit(request())).job
    await raw.delete(store.engine.owner.keys.job(orphan.id))
    claimed = await store.claim("w1", [MODEL], max_jobs=2)
    assert [c.job.id for c in claimed] == [job.id]
    assert await raw.exists(store.engine.owner.keys.job(orphan.id)) == 0
    assert await raw.zscore(store.engine.owner.keys.queue_timeouts, orphan.id) is None


async def test_recovery_drops_an_orphan_lease_and_never_recreates_its_record(
    make_store: StoreFactory, raw: Redis
) -> None:
    store = await make_store(lease_timeout=timedelta(seconds=0.05))
    job = (await store.submit(request())).job
    await store.claim("w1", [MODEL])
    await raw.delete(store.engine.owner.keys.job(job.id))
    await assert_eventually(lambda: eq(expired_leases(raw, store), 1))
    assert await store.recover() == []
    assert await raw.exists(store.engine.owner.keys.job(job.id)) == 0
    assert await raw.zscore(store.engine.owner.keys.leases, job.id) is None
    assert await raw.zscore(store.engine.owner.keys.run_deadlines, job.id) is None


# -- one round trip per hot-path call -------------------------------------------


async def test_each_hot_path_call_is_one_evalsha(
    store: RedisStore, raw: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    execute = cast(Callable[..., Awaitable[Any]], store.engine.connection.rpc.execute_command)

    async def counting(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return await execute(*args, **options)

    monkeypatch.setattr(store.engine.connection.rpc, "execute_command", counting)

    async def round_trips(call: Awaitable[Any]) -> tuple[list[str], int]:
        sent.clear()
        before = (await info(raw, "commandstats")).get("cmdstat_evalsha", {}).get("calls", 0)
        await call
        after = (await info(raw, "commandstats"))["cmdstat_evalsha"]["calls"]
        return sent.copy(), after - before

    one = (["EVALSHA"], 1)
    await store.submit(request())
    job = (await store.submit(request())).job
    assert await round_trips(store.submit(request(key="k"))) == one
    assert await round_trips(store.get(TENANT, job.id)) == one
    claim = store.claim("w1", [MODEL], max_jobs=2, wait=timedelta(seconds=1))
    assert await round_trips(claim) == one
    leased = (await store.claim("w1", [MODEL]))[0]
    assert await round_trips(store.heartbeat(leased.job.id, leased.lease_id, 0.1, "")) == one
    done = store.set_result(leased.job.id, leased.lease_id, JobStatus.COMPLETED, b"r")
    assert await round_trips(done) == one
    assert await round_trips(store.cancel(TENANT, job.id)) == one


# -- wake-ups across replicas -------------------------------------------


# These run with `pushed_wake_ups_only`: without the cross-replica wake-up
# the waiting claim would sleep out its whole 30 s wait, so they need no
# latency bound (a 1 s bound once failed on a loaded machine).


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_a_claim_waiting_on_one_replica_wakes_on_a_submit_to_another(
    make_store: StoreFactory,
) -> None:
    worker_side, gateway_side = await make_store(), await make_store()
    waiting = asyncio.ensure_future(worker_side.claim("w1", [MODEL], wait=timedelta(seconds=30)))
    await assert_eventually(lambda: claim_waiting(worker_side))
    job = (await gateway_side.submit(request())).job
    claimed = await asyncio.wait_for(waiting, 20)
    assert [c.job.id for c in claimed] == [job.id]


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_a_claim_waiting_on_one_replica_wakes_on_a_release_by_another(
    make_store: StoreFactory, raw: Redis
) -> None:
    worker_side = await make_store()
    other = await make_store(lease_timeout=timedelta(seconds=0.05))
    job = (await other.submit(request())).job
    await other.claim("w0", [MODEL])
    waiting = asyncio.ensure_future(worker_side.claim("w1", [MODEL], wait=timedelta(seconds=30)))
    await assert_eventually(lambda: claim_waiting(worker_side))
    await assert_eventually(lambda: eq(expired_leases(raw, other), 1))
    await other.recover()
    claimed = await asyncio.wait_for(waiting, 20)
    assert [c.job.id for c in claimed] == [job.id]


async def test_a_watch_on_one_replica_follows_changes_made_on_another(
    make_store: StoreFactory,
) -> None:
    watcher_side, worker_side = await make_store(), await make_store()
    await assert_a_watch_sees_every_transition(watcher_side, worker_side, step_timeout=2)


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_a_watch_sees_a_queue_move_published_while_it_first_read_the_job(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher_side, worker_side = await make_store(), await make_store()
    await worker_side.submit(request())
    job = (await worker_side.submit(request())).job
    read = watcher_side.engine.get
    first_read = True

    async def read_then_claim_ahead(tenant: str, job_id: str, operation: str) -> Any:
        # The job ahead is claimed after the watch's first read and before it
        # listens to its queue: the "q" message goes by unheard.
        nonlocal first_read
        snapshot = await read(tenant, job_id, operation)
        if first_read:
            first_read = False
            with watcher_side.engine.connection.notifier.listen([f"q {MODEL}"]) as heard:
                await worker_side.claim("w1", [MODEL])
                await heard.wait(10)
        return snapshot

    monkeypatch.setattr(watcher_side.engine, "get", read_then_claim_ahead)
    stream = watcher_side.watch(TENANT, job.id)
    seen = await asyncio.wait_for(anext(stream), 5)
    if seen.queue_position != 0:
        seen = await asyncio.wait_for(anext(stream), 5)
    assert seen.queue_position == 0


async def test_a_server_of_the_other_fair_share_mode_cannot_join_a_deployment(
    make_store: StoreFactory,
) -> None:
    await make_store(fair_share=True)  # the first server records the mode
    with pytest.raises(StoreMisconfigured, match="--fair-share tenant"):
        await make_store(fair_share=False)
    await make_store(fair_share=True)  # the same mode joins
