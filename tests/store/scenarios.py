"""Store scenarios run on more than one topology (one Redis, Redis Cluster)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from store import Store
from store.model import Job, JobSpec, JobStatus, SubmitRequest
from tests.helpers import assert_eventually
from tests.timings import Timings

TENANT = "acme"
MODEL = "llm-small"


async def assert_a_watch_sees_every_transition(
    gateway_side: Store, worker_side: Store, step_timeout: float = 5.0
) -> None:
    """A watch on `gateway_side` sees each step `worker_side` makes: moved up, claimed,
    progress, result (each within `step_timeout`, so by wake-ups, not the re-check),
    then ends."""
    spec = SubmitRequest(TENANT, JobSpec(MODEL, b"input"))
    await gateway_side.submit(spec)
    job = (await gateway_side.submit(spec)).job
    stream = gateway_side.watch(TENANT, job.id)

    async def step() -> Job:
        return await asyncio.wait_for(anext(stream), step_timeout)

    assert (await step()).queue_position == 1
    await worker_side.claim("w1", [MODEL])
    assert (await step()).queue_position == 0
    [leased] = await worker_side.claim("w1", [MODEL])
    assert (await step()).status is JobStatus.PROCESSING
    await worker_side.heartbeat(job.id, leased.lease_id, 0.5, "half")
    assert (await step()).progress == 0.5
    await worker_side.set_result(job.id, leased.lease_id, JobStatus.COMPLETED, b"r")
    assert (await step()).status is JobStatus.COMPLETED
    try:
        await step()
    except StopAsyncIteration:
        return
    raise AssertionError("the watch went on after the job completed")


async def assert_a_waiting_claim_is_woken(
    waiter: Store, submit: Callable[[], Awaitable[Job]], timings: Timings, variant: str
) -> None:
    """A claim waiting on `waiter` returns the job `submit` queues. How soon goes to
    `timings`: the bench's bound (2 s) tells the notification from the re-check."""
    claim = asyncio.create_task(waiter.claim("w1", [MODEL], wait=timedelta(seconds=20)))
    await assert_eventually(
        lambda: asyncio.sleep(0, waiter.waiting_claims(MODEL) == 1),  # type: ignore[attr-defined]
        timeout=5,
    )
    started = time.monotonic()
    job = await submit()
    [claimed] = await asyncio.wait_for(claim, 10)
    assert claimed.job.id == job.id
    timings("wake-up: a waiting claim answers a new job", time.monotonic() - started, variant)
