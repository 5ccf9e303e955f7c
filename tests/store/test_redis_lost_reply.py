"""A script's reply lost on the way back (redis-py resends the same EVALSHA) runs it once.

The FaultProxy (tests/proxy.py) sits between RedisStore and the test
redis-server: it lets one script call reach Redis and run, then breaks the
connection before the reply comes back, or holds the reply past a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from store import StoreSettings
from store.errors import QueueFull, StoreUnavailable
from store.keys import Declared
from store.model import JobStatus, ResultReport, SubmitRequest
from store.redis import RedisStore
from store.redis.calls import ScriptCall
from store.redis.scripts import ArgValue, read_script
from tests.helpers import assert_eventually
from tests.proxy import FaultProxy
from tests.redis_server import RedisServer
from tests.store.conftest import TENANT, spec, submit_group, submit_one

pytestmark = pytest.mark.redis

MakeProxied = Callable[..., Awaitable[RedisStore]]


def sha(name: str) -> bytes:
    """What identifies a call of store/lua/<name>.lua on the wire."""
    return read_script(name).sha.encode()


@pytest.fixture
async def proxy(redis_server: RedisServer) -> AsyncIterator[FaultProxy]:
    proxy = FaultProxy("127.0.0.1", redis_server.port)
    await proxy.start()
    yield proxy
    await proxy.close()


@pytest.fixture
async def make_proxied(proxy: FaultProxy, partition: str) -> AsyncIterator[MakeProxied]:
    opened: list[RedisStore] = []

    async def make(**overrides: Any) -> RedisStore:
        settings = dataclasses.replace(StoreSettings(), **overrides)
        store = RedisStore(proxy.url, settings, partition=partition)
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


async def test_unkeyed_submit_whose_reply_is_lost_counts_the_job_once(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied(max_live_total=2)
    fault = proxy.drop_reply(sha("submit"))
    await submit_one(store)
    assert fault.hits == 1
    await submit_one(store)  # fits: the first job was counted once
    with pytest.raises(QueueFull):
        await submit_one(store)


async def test_group_submit_whose_reply_is_lost_lists_each_child_once(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied()
    fault = proxy.drop_reply(sha("submit"))
    group = await submit_group(store, 3)
    assert fault.hits == 1
    job = await store.get(TENANT, group.id)
    assert [child.child_index for child in job.children] == [0, 1, 2]


async def test_keyed_first_submit_whose_reply_is_lost_answers_not_reused(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied()
    fault = proxy.drop_reply(sha("submit"))
    result = await store.submit(SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="k1"))
    assert fault.hits == 1
    assert result.reused is False


async def test_claim_whose_reply_is_lost_answers_the_leases_it_made(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied()
    job = await submit_one(store)
    fault = proxy.drop_reply(sha("claim"))
    claimed = await store.claim("w1", ["llm-small"])
    assert fault.hits == 1
    assert [item.job.id for item in claimed] == [job.id]
    assert claimed[0].job.attempts == 1
    await store.heartbeat(job.id, claimed[0].lease_id, 0.5, "")  # the live lease


async def test_cancel_whose_reply_is_lost_answers_cancelled(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied()
    job = await submit_one(store)
    fault = proxy.drop_reply(sha("cancel"))
    result = await store.cancel(TENANT, job.id, "no longer needed")
    assert fault.hits == 1
    assert result.cancelled is True
    assert result.job.status is JobStatus.CANCELLED


async def test_set_result_whose_reply_is_lost_answers_applied(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied()
    await submit_one(store)
    [claimed] = await store.claim("w1", ["llm-small"])
    fault = proxy.drop_reply(sha("set_result"))
    recorded = await store.record_result(
        claimed.job.id, claimed.lease_id, ResultReport(JobStatus.COMPLETED, b"done")
    )
    assert fault.hits == 1
    assert recorded.applied is True
    assert recorded.job.status is JobStatus.COMPLETED


async def _is_queued_unclaimed(store: RedisStore, job_id: str) -> bool:
    job = await store.get(TENANT, job_id)
    return job.status is JobStatus.QUEUED and job.attempts == 0 and job.queue_position == 0


async def test_claim_whose_reply_comes_after_the_socket_timeout_releases_its_leases(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied()
    job = await submit_one(store)
    proxy.delay_reply(sha("claim"), 3.0)
    with pytest.raises(StoreUnavailable):
        await store.claim("w1", ["llm-small"])
    await assert_eventually(lambda: _is_queued_unclaimed(store, job.id))
    [again] = await store.claim("w1", ["llm-small"])
    assert (again.job.id, again.job.attempts) == (job.id, 1)


async def test_claim_cancelled_while_its_script_runs_releases_its_leases(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied()
    first = await submit_one(store)
    await submit_one(store)
    fault = proxy.delay_reply(sha("claim"), 0.5)
    claim = asyncio.create_task(store.claim("w1", ["llm-small"]))

    async def script_ran() -> bool:
        return fault.hits == 1

    await assert_eventually(script_ran)
    claim.cancel()
    with pytest.raises(asyncio.CancelledError):
        await claim
    await assert_eventually(lambda: _is_queued_unclaimed(store, first.id))
    [again] = await store.claim("w1", ["llm-small"])
    assert again.job.id == first.id  # back at its original place, ahead of the second


async def test_a_claim_that_reaches_redis_after_its_release_claims_nothing(
    make_proxied: MakeProxied,
) -> None:
    # a timed-out claim's request may still be on its way when its release runs
    store = await make_proxied()
    job = await submit_one(store)
    op_key = store.engine.owner.keys.op("late")
    part = store.engine.owner
    await part._release_claim(op_key, Declared())
    claim_args: list[ArgValue] = ["w1", 30000, 1, 4, 1, "llm-small", "lease-1"]
    declared = Declared([job.id], ["llm-small"])
    reply = await part.call_once(ScriptCall("claim", claim_args, declared, trailing=[op_key]))
    assert reply == [[], [], []]
    assert await _is_queued_unclaimed(store, job.id)


async def test_batch_whose_reply_is_lost_answers_the_first_runs_outcome(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied(max_live_total=3)
    existing = await store.submit(SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="old"))
    requests = [
        SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="old"),
        SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="new"),
        SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="new"),
        SubmitRequest(tenant=TENANT, work=spec()),
    ]
    fault = proxy.drop_reply(sha("submit_batch"))
    results = await store.submit_batch(requests)
    assert fault.hits == 1
    assert [result.reused for result in results] == [True, False, True, False]
    assert results[0].job.id == existing.job.id
    assert results[1].job.id == results[2].job.id
    with pytest.raises(QueueFull):  # the batch's two jobs were counted once: 3 live
        await submit_one(store)


async def test_report_and_claim_with_a_lost_reply_answers_the_first_run(
    make_proxied: MakeProxied, proxy: FaultProxy
) -> None:
    store = await make_proxied()
    await submit_one(store)
    nxt = await submit_one(store)
    [claimed] = await store.claim("w1", ["llm-small"])
    fault = proxy.drop_reply(sha("report_and_claim"))
    report = ResultReport(JobStatus.COMPLETED, b"done")
    step = await store.report_and_claim(
        "w1", ["llm-small"], [(claimed.job.id, claimed.lease_id, report)], 1
    )
    assert fault.hits == 1
    # the resend answered what the first run did: applied, and the same lease handed out
    assert step.results[0].recorded is not None and step.results[0].recorded.applied
    assert [c.job.id for c in step.claimed] == [nxt.id]
    again = await store.get(TENANT, nxt.id)
    assert (again.status, again.attempts) == (JobStatus.PROCESSING, 1)
    assert again.worker_id == "w1"
