"""Notifications split by audience (real redis-server).

"r" messages go on the ready channel (claims: the worker-server), "j" and
"q" on the changes channel (watchers, event follows: the gateway); a store
subscribes to the channels it is asked to hear. See store/redis/notify.py
and docs/redis-layout.md, "Wake-ups across replicas".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from store import StoreSettings, StoreUnavailable, open_store
from store.model import JobSpec, JobStatus, SubmitRequest
from store.redis import RedisStore
from store.redis.notify import ANY_MESSAGE, UnheardTopic
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.store.scenarios import assert_a_watch_sees_every_transition

pytestmark = pytest.mark.redis

TENANT = "acme"
MODEL = "llm-small"
MakeStore = Callable[..., Awaitable[RedisStore]]


def request() -> SubmitRequest:
    return SubmitRequest(TENANT, JobSpec(MODEL, b"input"))


@pytest.fixture
async def make_store(redis_server: RedisServer, partition: str) -> AsyncIterator[MakeStore]:
    stores: list[RedisStore] = []

    async def make(hear_ready: bool = True, hear_changes: bool = True) -> RedisStore:
        store = RedisStore(
            redis_server.url,
            StoreSettings(),
            partition=partition,
            hear_ready=hear_ready,
            hear_changes=hear_changes,
        )
        await store.open()
        stores.append(store)
        return store

    yield make
    for store in stores:
        await store.close()


def heard_messages(store: RedisStore) -> list[str]:
    """Every published message `store`'s subscription reads from now on (call before open)."""
    heard: list[str] = []
    dispatch = store.engine.connection.notifier._dispatch

    def counting(message: dict[str, Any]) -> None:
        if message.get("type") == "message":
            heard.append(message["data"].decode())
        dispatch(message)

    store.engine.connection.notifier._dispatch = counting  # type: ignore[method-assign]
    return heard


async def subscribers(raw: Redis, channel: str) -> int:
    [(_, count)] = await raw.pubsub_numsub(channel)
    return int(count)


async def run_one_job(store: RedisStore) -> str:
    """Submit, claim, heartbeat, complete; the job's id."""
    job = (await store.submit(request())).job
    [claimed] = await store.claim("w1", [MODEL])
    await store.heartbeat(job.id, claimed.lease_id, 0.5, "half")
    await store.set_result(job.id, claimed.lease_id, JobStatus.COMPLETED, b"done")
    return job.id


async def test_a_store_not_hearing_changes_subscribes_to_the_ready_channel_only(
    make_store: MakeStore, raw: Redis
) -> None:
    store = await make_store(hear_changes=False)
    assert await subscribers(raw, store.engine.owner.keys.notify) == 1
    assert await subscribers(raw, store.engine.owner.keys.changes) == 0


async def test_a_store_hearing_both_subscribes_to_both_channels(
    make_store: MakeStore, raw: Redis
) -> None:
    store = await make_store()
    assert await subscribers(raw, store.engine.owner.keys.notify) == 1
    assert await subscribers(raw, store.engine.owner.keys.changes) == 1


async def test_a_store_not_hearing_changes_reads_only_ready_messages(
    redis_server: RedisServer, partition: str
) -> None:
    worker_side = RedisStore(redis_server.url, StoreSettings(), partition, hear_changes=False)
    heard = heard_messages(worker_side)
    await worker_side.open()
    try:
        job_id = await run_one_job(worker_side)
        # one connection delivers in publish order: once a later submit's
        # ready message is in, every earlier message would be too
        marker = (await worker_side.submit(request())).job.id

        async def marker_heard() -> bool:
            return f"r {MODEL} {marker}" in heard

        await assert_eventually(marker_heard)
        assert heard == [f"r {MODEL} {job_id}", f"r {MODEL} {marker}"]
    finally:
        await worker_side.close()


async def test_a_store_hearing_both_reads_the_change_messages_too(
    redis_server: RedisServer, partition: str
) -> None:
    store = RedisStore(redis_server.url, StoreSettings(), partition)
    heard = heard_messages(store)
    await store.open()
    try:
        job_id = await run_one_job(store)

        async def finish_heard() -> bool:
            # claim, heartbeat, result; a submit says only "r": nobody can
            # be watching a job just made
            return heard.count(f"j {job_id}") == 3

        await assert_eventually(finish_heard)
        assert f"r {MODEL} {job_id}" in heard
        assert f"q {MODEL}" in heard
    finally:
        await store.close()


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_a_watch_on_a_gateway_store_sees_every_transition_made_by_a_worker_store(
    make_store: MakeStore,
) -> None:
    gateway_side, worker_side = await make_store(), await make_store(hear_changes=False)
    await assert_a_watch_sees_every_transition(gateway_side, worker_side)


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_a_claim_on_a_worker_store_is_woken_by_a_submit_on_a_gateway_store(
    make_store: MakeStore,
) -> None:
    gateway_side, worker_side = await make_store(), await make_store(hear_changes=False)
    claim = asyncio.create_task(worker_side.claim("w1", [MODEL], wait=timedelta(seconds=60)))

    async def waiting() -> bool:
        return worker_side.waiting_claims(MODEL) == 1

    await assert_eventually(waiting)
    job = (await gateway_side.submit(request())).job
    [claimed] = await asyncio.wait_for(claim, 10)
    assert claimed.job.id == job.id


async def test_a_watch_on_a_store_not_hearing_changes_raises(make_store: MakeStore) -> None:
    store = await make_store(hear_changes=False)
    job = (await store.submit(request())).job
    with pytest.raises(UnheardTopic):
        await anext(store.watch(TENANT, job.id))


async def test_a_claim_on_a_store_not_hearing_ready_raises(make_store: MakeStore) -> None:
    store = await make_store(hear_ready=False)
    with pytest.raises(UnheardTopic):
        await store.claim("w1", [MODEL], wait=timedelta(seconds=1))


async def test_listening_for_any_message_needs_the_changes_channel(
    make_store: MakeStore,
) -> None:
    store = await make_store(hear_changes=False)
    with pytest.raises(UnheardTopic), store.engine.listen([ANY_MESSAGE]):
        pass


async def test_a_refused_listener_is_not_left_registered(make_store: MakeStore) -> None:
    store = await make_store(hear_changes=False)
    with pytest.raises(UnheardTopic), store.engine.listen([f"r {MODEL}", "j 01JOB"]):
        pass
    assert store.engine.connection.notifier.listeners(f"r {MODEL}") == 0


async def test_a_store_hearing_nothing_opens_and_refuses_every_listener(
    make_store: MakeStore, raw: Redis
) -> None:
    store = await make_store(hear_ready=False, hear_changes=False)
    assert await subscribers(raw, store.engine.owner.keys.notify) == 0
    await store.submit(request())
    for topic in (f"r {MODEL}", "j 01JOB", f"q {MODEL}", ANY_MESSAGE):
        with pytest.raises(UnheardTopic), store.engine.listen([topic]):
            pass


@pytest.mark.usefixtures("pushed_wake_ups_only")
async def test_a_gateway_store_hears_change_messages_an_older_server_published_on_notify(
    make_store: MakeStore, raw: Redis
) -> None:
    # Mid-upgrade: the previous scripts publish everything on the notify channel.
    store = await make_store()
    with store.engine.listen(["j 01JOB"]) as listener:
        await raw.publish(store.engine.owner.keys.notify, "j 01JOB")
        await listener.wait(10)
        assert listener.event.is_set()


async def test_a_down_subscription_fails_a_worker_stores_waiting_claim(
    own_redis: RedisServer, partition: str
) -> None:
    store = RedisStore(own_redis.url, StoreSettings(), partition, hear_changes=False)
    await store.open()
    try:
        claim = asyncio.create_task(store.claim("w1", [MODEL], wait=timedelta(seconds=60)))

        async def waiting() -> bool:
            return store.waiting_claims(MODEL) == 1

        await assert_eventually(waiting)
        own_redis.stop()
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(claim, 10)
    finally:
        await store.close()


async def test_a_partitioned_blocking_events_read_without_changes_still_returns_new_events(
    redis_server: RedisServer, partition: str
) -> None:
    # The worker-server's audit log (when it leads recovery) reads this way.
    worker_side = open_store(
        redis_server.url, StoreSettings(), partition, partitions=3, hear_changes=False
    )
    assert isinstance(worker_side, RedisStore)
    await worker_side.open()
    try:
        after = await worker_side.newest_event_id()
        reads = 0
        read_events = worker_side.engine._events._read

        async def counted(cursor: list[str], count: int) -> Any:
            nonlocal reads
            reads += 1
            return await read_events(cursor, count)

        worker_side.engine._events._read = counted  # type: ignore[method-assign]
        read = asyncio.create_task(worker_side.events(after=after, block=timedelta(seconds=60)))

        async def found_nothing_yet() -> bool:
            return reads >= 1

        await assert_eventually(found_nothing_yet)
        job = (await worker_side.submit(request())).job
        events = await asyncio.wait_for(read, 10)
        assert [event.job_id for event in events] == [job.id]
    finally:
        await worker_side.close()
