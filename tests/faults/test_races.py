"""Races at the edge of a lease: a heartbeat arriving as the lease expires (with a
rival worker polling for the requeued job), and cancel vs claim vs SetResult.

The test itself is the worker here, so it writes the ledger's attempts and
refusals from the answers it gets."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable

import grpc
import pytest

from jobgate.v1 import worker_service_pb2
from tests.e2e.api import Api, Failure, parse_failure, tenant_metadata
from tests.faults.conftest import RigFactory, Scale
from tests.faults.ledger import Attempt, Refusal
from tests.faults.rig import Figures, Rig, assert_clean, figures_of, payload, status_name

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT = "acme"
#: Races in flight at once: below redis-py's pool of 100 connections per server
#: process, which refuses more (see docs/reliability.md, known failures).
IN_FLIGHT = 32


@pytest.fixture
async def rig(make_rig: RigFactory) -> AsyncIterator[Rig]:
    yield make_rig()


def worker_api(rig: Rig, channel: grpc.aio.Channel, worker_id: str) -> Api:
    return Api(rig.job_channel, channel, tenant_metadata(TENANT), worker_id=worker_id)


class Evidence:
    """Attempts and refusals the test's own workers saw."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig

    def ran(self, api: Api, job_id: str, attempt: int, lease: str, start: float) -> None:
        self.rig.extra_attempts.append(
            Attempt(job_id, attempt, lease, api.worker_id, start, time.time(), "completed")
        )

    def refused(self, api: Api, job_id: str, reason: str) -> None:
        self.rig.extra_refusals.append(Refusal(job_id, api.worker_id, reason, time.time()))


async def outcome(call: object) -> Failure | None:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return parse_failure(error)
    return None


async def test_heartbeat_racing_lease_expiry(
    rig: Rig, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    evidence = Evidence(rig)
    channel = grpc.aio.insecure_channel(rig.deployment.worker_target)
    main, rival = worker_api(rig, channel, "main"), worker_api(rig, channel, "rival")
    rounds = scale(2, 20)
    ids: list[str] = []
    counts = {"extended": 0, "leases_lost": 0}

    async def rival_loop(stop: asyncio.Event) -> None:
        while not stop.is_set():
            for claimed in await rival.claim([rig.model], wait=0.2, max_jobs=8):
                start = time.time()
                await rival.complete(claimed.job.id, claimed.lease_id)
                evidence.ran(rival, claimed.job.id, claimed.job.attempts, claimed.lease_id, start)

    async def race(claimed: worker_service_pb2.ClaimedJob) -> None:
        job, lease = claimed.job, claimed.lease_id
        start = time.time()
        expire = claimed.lease_expire_time.ToNanoseconds() / 1e9
        await asyncio.sleep(max(0.0, expire - time.time() + random.uniform(-0.25, 0.25)))
        refused = await outcome(main.heartbeat(job.id, lease, 0.5))
        if refused is None:
            counts["extended"] += 1
            assert await outcome(main.complete(job.id, lease)) is None  # the lease is fresh
            evidence.ran(main, job.id, job.attempts, lease, start)
            return
        counts["leases_lost"] += 1
        assert refused.reason == "LEASE_LOST", refused
        evidence.refused(main, job.id, "LEASE_LOST")
        late = await outcome(main.complete(job.id, lease))
        assert late is not None and late.reason == "LEASE_LOST", late
        rig.extra_attempts.append(Attempt(job.id, job.attempts, lease, "main", start, time.time()))

    # Rounds of IN_FLIGHT jobs: main claims them all before the rival starts
    # polling, so the rival can only take what an expiry put back.
    for _ in range(rounds):
        batch = [await rig.submit_job(TENANT, payload()) for _ in range(IN_FLIGHT)]
        ids += batch
        claims: list[worker_service_pb2.ClaimedJob] = []
        while len(claims) < len(batch):
            claims += await main.claim([rig.model], wait=1.0, max_jobs=len(batch) - len(claims))
        stop = asyncio.Event()
        rivalry = asyncio.create_task(rival_loop(stop))
        await asyncio.gather(*(race(c) for c in claims))
        await rig.drain({TENANT: batch})
        stop.set()
        await rivalry
    ledger = await rig.collect({TENANT: ids})
    await channel.close(None)

    assert_clean(ledger)
    assert all(f.status == "completed" for f in ledger.finals.values())
    figures(figures_of("heartbeat vs lease expiry", ledger, len(ids), **counts))


async def test_cancel_racing_claim_and_set_result(
    rig: Rig, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    evidence = Evidence(rig)
    channel = grpc.aio.insecure_channel(rig.deployment.worker_target)
    worker = worker_api(rig, channel, "racer")
    jobs = scale(60, 1000)
    seen: dict[str, str] = {}

    gate = asyncio.Semaphore(IN_FLIGHT)

    async def race(index: int) -> str:
        async with gate:
            return await race_one(index)

    async def race_one(index: int) -> str:
        model = f"{rig.model}-{index}"
        job_id = await rig.submit_job(TENANT, payload(), model=model)

        async def cancel() -> bool:
            await asyncio.sleep(random.uniform(0, 0.03))
            return (await rig.cancel(TENANT, job_id)).cancelled

        async def claim_and_finish() -> str:
            await asyncio.sleep(random.uniform(0, 0.03))
            claimed = await worker.claim([model])
            if not claimed:
                return "unclaimed"
            lease, start = claimed[0].lease_id, time.time()
            refused = await outcome(worker.complete(job_id, lease))
            if refused is None:
                evidence.ran(worker, job_id, claimed[0].job.attempts, lease, start)
                return "completed"
            evidence.refused(worker, job_id, refused.reason or "")
            rig.extra_attempts.append(Attempt(job_id, 1, lease, "racer", start, time.time()))
            return f"refused {refused.reason}"

        cancelled, work = await asyncio.gather(cancel(), claim_and_finish())
        final = await rig.get(TENANT, job_id)
        assert final is not None
        status = status_name(final.status)
        expected = {
            (True, "unclaimed"): "cancelled",
            (True, "refused JOB_CANCELLED"): "cancelled",
            (False, "completed"): "completed",
        }.get((cancelled, work))
        assert status == expected, (job_id, cancelled, work, status)
        seen[job_id] = f"{cancelled}/{work}"
        return job_id

    ids = await asyncio.gather(*(race(i) for i in range(jobs)))
    ledger = await rig.collect({TENANT: ids})
    await channel.close(None)

    assert_clean(ledger, ran=False)
    mix = {k: list(seen.values()).count(k) for k in sorted(set(seen.values()))}
    figures(figures_of("cancel vs claim vs SetResult", ledger, jobs, **mix))
