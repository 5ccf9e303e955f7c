"""RedisStore's ListJobs indexes as Redis holds them: members, their upkeep, the drain.

The walks themselves are held on every backend by test_contract_list.py;
these look at the keys (store/lua/includes/index.lua).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from store.model import GroupSpec, JobFilter, JobSpec, JobStatus, StoreSettings, SubmitRequest
from store.redis import RedisStore
from store.redis.listing import KIND_CODES, STATUS_CODES
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer

pytestmark = pytest.mark.redis

TENANT = "acme"
MODEL = "llm-small"
INDEX_LUA = Path(__file__).resolve().parents[2] / "store" / "lua" / "includes" / "index.lua"
SHORT_TTL = timedelta(seconds=0.2)


def _lua_table(name: str) -> dict[str, str]:
    body = re.search(rf"local {name} = \{{(.*?)\}}", INDEX_LUA.read_text(), re.DOTALL)
    assert body is not None
    return dict(re.findall(r"(\w+) = '(\w)'", body.group(1)))


def test_the_lua_status_and_kind_codes_are_the_pythons() -> None:
    assert _lua_table("INDEX_STATUS") == {s.value: c for s, c in STATUS_CODES.items()}
    assert _lua_table("INDEX_KIND") == {k.value: c for k, c in KIND_CODES.items()}


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def _store(server: RedisServer, partition: str, **settings: object) -> RedisStore:
    store = RedisStore(server.url, StoreSettings(**settings), partition=partition)  # type: ignore[arg-type]
    await store.open()
    return store


async def test_a_job_has_one_status_member_and_one_model_member(
    redis_server: RedisServer, partition: str, raw: Redis
) -> None:
    store = await _store(redis_server, partition)
    try:
        job = (await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job
        [claimed] = await store.claim("w1", [MODEL])
        keys = store.engine.owner.keys
        status_run: Any = await raw.zrange(keys.index_status, 0, -1)
        members = [m.decode() for m in status_run]
        created = f"{round(job.create_time.timestamp() * 1000):013d}"
        assert members == [f"{TENANT}|ps{created}{job.id}"]
        model_run: Any = await raw.zrange(keys.index_model(TENANT, MODEL), 0, -1)
        assert [m.decode() for m in model_run] == [created + job.id]
        assert claimed.job.id == job.id
    finally:
        await store.close()


async def test_a_groups_child_ids_ascend_with_their_index(
    redis_server: RedisServer, partition: str
) -> None:
    store = await _store(redis_server, partition)
    try:
        children = tuple(JobSpec(MODEL) for _ in range(20))
        group = (await store.submit(SubmitRequest(TENANT, GroupSpec(children)))).job
        ordered = sorted(group.children, key=lambda child: child.child_index)
        assert [c.id for c in ordered] == sorted(c.id for c in ordered)
    finally:
        await store.close()


async def test_expired_jobs_leave_every_index_key(
    redis_server: RedisServer, partition: str, raw: Redis
) -> None:
    store = await _store(redis_server, partition, result_ttl=SHORT_TTL)
    keys = store.engine.owner.keys
    try:
        job = (await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job
        group = (await store.submit(SubmitRequest(TENANT, GroupSpec((JobSpec("m2"),))))).job
        await store.cancel(TENANT, job.id)
        await store.cancel(TENANT, group.id)
        assert await raw.llen(keys.index_expiring) == 3  # the job, the group, its child

        async def drained() -> bool:
            await store.recover()
            return not await raw.exists(
                keys.index_status, keys.index_expiring, keys.index_model(TENANT, MODEL)
            )

        await assert_eventually(drained)
        assert not await raw.exists(keys.index_model(TENANT, "m2"))
    finally:
        await store.close()


async def test_a_retried_jobs_old_expiry_entry_leaves_it_indexed(
    redis_server: RedisServer, partition: str, raw: Redis
) -> None:
    store = await _store(redis_server, partition, result_ttl=SHORT_TTL)
    keys = store.engine.owner.keys
    try:
        job = (await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job
        await store.cancel(TENANT, job.id)
        await store.retry_job(TENANT, job.id)

        async def dropped() -> bool:
            await store.recover()
            return await raw.llen(keys.index_expiring) == 0

        await assert_eventually(dropped)
        listed = await store.list_jobs(TENANT, JobFilter(), None, 10)
        assert [(j.id, j.status) for j in listed.jobs] == [(job.id, JobStatus.QUEUED)]
        assert await raw.zcard(keys.index_status) == 1
    finally:
        await store.close()


async def test_an_entry_due_before_its_record_expires_waits_for_it(
    redis_server: RedisServer, partition: str, raw: Redis
) -> None:
    store = await _store(redis_server, partition, result_ttl=SHORT_TTL)
    keys = store.engine.owner.keys
    try:
        job = (await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job
        await store.cancel(TENANT, job.id)
        await raw.pexpire(keys.job(job.id), 60_000)  # as if result_ttl had grown
        before = (await raw.lindex(keys.index_expiring, 0)) or b""

        async def moved() -> bool:
            await store.recover()
            return (await raw.lindex(keys.index_expiring, 0)) not in (None, before)

        await assert_eventually(moved)
        assert await raw.zcard(keys.index_status) == 1
        listed = await store.list_jobs(TENANT, JobFilter(), None, 10)
        assert [j.id for j in listed.jobs] == [job.id]
    finally:
        await store.close()


async def test_a_walk_skips_a_member_whose_record_is_gone(
    redis_server: RedisServer, partition: str, raw: Redis
) -> None:
    store = await _store(redis_server, partition)
    try:
        gone = (await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job
        kept = (await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job
        await raw.delete(store.engine.owner.keys.job(gone.id))
        listed = await store.list_jobs(TENANT, JobFilter(), None, 10)
        assert [j.id for j in listed.jobs] == [kept.id]
    finally:
        await store.close()
