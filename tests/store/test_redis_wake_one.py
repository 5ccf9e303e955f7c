"""A ready message wakes one waiting claim, not all of them (real redis-server).

See store/redis/notify.py ("Claims listen with `wake_one`"). These run
with `pushed_wake_ups_only`: the 5 s safety re-check is pushed out of
reach, so a claim that gets a job got it through a pushed wake-up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from store import StoreSettings
from store.model import ClaimedJob, JobSpec, SubmitRequest
from store.redis import RedisStore
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("pushed_wake_ups_only")]

TENANT = "acme"
MODEL = "llm-small"
CLAIMS = 8
# Generous for a shared 2-core machine, far under the pushed-out re-check.
PROMPTLY = 2.0
Claims = list["asyncio.Task[list[ClaimedJob]]"]


def request() -> SubmitRequest:
    return SubmitRequest(TENANT, JobSpec(MODEL, b"input"))


@pytest.fixture
async def store(redis_server: RedisServer, partition: str) -> AsyncIterator[RedisStore]:
    store = RedisStore(redis_server.url, StoreSettings(), partition=partition)
    await store.open()
    yield store
    await store.close()


@pytest.fixture
def attempts(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per claim script a claim on `store` runs, from now on."""
    seen: list[str] = []
    claim_once: Callable[..., Awaitable[list[ClaimedJob]]] = store.engine.claim_now

    async def counting(worker_id: str, *args: Any) -> list[ClaimedJob]:
        seen.append(worker_id)
        return await claim_once(worker_id, *args)

    monkeypatch.setattr(store.engine, "claim_now", counting)
    return seen


async def waiting(store: RedisStore, count: int) -> bool:
    return store.waiting_claims(MODEL) == count


async def start_claims(store: RedisStore) -> Claims:
    """CLAIMS claims on MODEL, started one after another, all waiting (first waited longest)."""
    tasks: Claims = []
    for index in range(CLAIMS):
        claim = store.claim(f"w{index}", [MODEL], wait=timedelta(seconds=60))
        tasks.append(asyncio.create_task(claim))
        await assert_eventually(lambda: waiting(store, len(tasks)))
    return tasks


async def stop(tasks: Claims) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_one_submit_runs_one_claim_among_eight_waiting(
    store: RedisStore, attempts: list[str]
) -> None:
    tasks = await start_claims(store)
    attempts.clear()
    job = (await store.submit(request())).job
    done, _ = await asyncio.wait(tasks, timeout=PROMPTLY, return_when=asyncio.FIRST_COMPLETED)
    # a claim woken for nothing would run its script and wait again: let it
    await assert_eventually(lambda: waiting(store, CLAIMS - 1))
    assert [[c.job.id for c in task.result()] for task in done] == [[job.id]]
    assert len(attempts) == 1
    assert sum(task.done() for task in tasks) == 1
    await stop(tasks)


async def test_the_longest_waiting_claim_is_the_one_woken(
    store: RedisStore, attempts: list[str]
) -> None:
    tasks = await start_claims(store)
    await store.submit(request())
    await asyncio.wait_for(asyncio.shield(tasks[0]), PROMPTLY)
    assert len(tasks[0].result()) == 1
    await stop(tasks)


async def test_three_quick_submits_wake_three_different_claims(store: RedisStore) -> None:
    tasks = await start_claims(store)
    jobs = await asyncio.gather(*(store.submit(request()) for _ in range(3)))
    claimed: list[str] = []
    pending = set(tasks)
    async with asyncio.timeout(PROMPTLY):
        while len(claimed) < 3:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            claimed += [c.job.id for task in done for c in task.result()]
    assert sorted(claimed) == sorted(r.job.id for r in jobs)
    await assert_eventually(lambda: waiting(store, CLAIMS - 3))
    await stop(tasks)


async def test_a_woken_claim_cancelled_before_it_claims_hands_its_wake_on(
    store: RedisStore, attempts: list[str]
) -> None:
    tasks = await start_claims(store)
    heard = store.engine.connection.notifier.on_ready

    def cancel_the_one_to_wake(channel: str, model: str, job_id: str) -> None:
        # called as the message is read, just before it wakes the claim that
        # waited longest: that claim is woken with a cancel due before it runs
        tasks[0].cancel()
        heard(channel, model, job_id)

    store.engine.connection.notifier.on_ready = cancel_the_one_to_wake
    attempts.clear()
    job = (await store.submit(request())).job
    claimed = await asyncio.wait_for(asyncio.shield(tasks[1]), PROMPTLY)
    assert [c.job.id for c in claimed] == [job.id]
    assert tasks[0].cancelled()
    assert attempts == ["w1"]
    await stop(tasks)
