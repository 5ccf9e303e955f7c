"""Worker faults: SIGKILL mid-job (repeatedly), SIGSTOP past the lease, a poison job,
and a job that heartbeats forever until its run timeout."""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Callable

import pytest

from tests.faults.conftest import RigFactory, Scale
from tests.faults.ledger import Ledger, percentile, recovery_times
from tests.faults.rig import (
    Figures,
    Load,
    Rig,
    assert_clean,
    figures_of,
    payload,
    submit_many,
    until,
)
from tests.timings import Timings

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT = "acme"
LEASE = 1.0


def started_on(rig: Rig, worker_id: str) -> int:
    return sum(1 for a in rig.read_attempts() if a.worker_id == worker_id and a.end is None)


async def supervise(rig: Rig, workers: int, stop: asyncio.Event, concurrency: int = 4) -> None:
    """Keep `workers` daemons alive: replace any that died (a poison job kills its own)."""
    while not stop.is_set():
        rig.note_deaths()
        for _ in range(workers - len(rig.alive_workers())):
            rig.start_worker(concurrency)
        await asyncio.sleep(0.1)


async def test_worker_sigkill_mid_job_repeatedly(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None], timings: Timings
) -> None:
    rig = make_rig()
    kills = scale(6, 80)
    stop = asyncio.Event()
    keeper = asyncio.create_task(supervise(rig, 3, stop))
    done = 0
    async with Load(rig, TENANT, payload(0.15)) as load:
        while done < kills:
            await asyncio.sleep(random.uniform(0.4, 0.9))
            busy = [w for w in rig.alive_workers() if started_on(rig, w.worker_id)]
            if busy:
                rig.kill_worker(random.choice(busy))
                done += 1
    ids = load.ids
    ledger = await rig.collect({TENANT: ids}, timeout=scale(90, 900))
    stop.set()
    await keeper

    assert_clean(ledger)
    late = percentile(recovery_times(ledger), 0.99) - LEASE
    timings("worker SIGKILL: recovery p99 past the lease", late, "steady load")
    figures(figures_of("worker SIGKILL mid-job, repeatedly", ledger, done))


async def test_worker_sigstop_past_the_lease_then_sigcont(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    rig = make_rig()
    rounds = scale(1, 10)
    ids: list[str] = []
    refused = 0
    for _ in range(rounds):
        frozen = rig.start_worker(concurrency=2)
        batch = await submit_many(rig, TENANT, 2, payload(LEASE * 3))
        ids += batch
        frozen_id = frozen.worker_id
        assert await until(lambda: started_on(rig, frozen_id) == 2, 30)  # noqa: B023
        rig.signal_worker(frozen, signal.SIGSTOP)
        rig.start_worker(concurrency=2)
        assert await until(lambda: _rescued(rig, batch, frozen_id) == 2, 30)  # noqa: B023
        rig.signal_worker(frozen, signal.SIGCONT)
        assert await until(lambda: _refused(rig, frozen_id) == 2, 30)  # noqa: B023
        refused += 2
        # Next round starts with no idle worker that could take the frozen one's jobs.
        await rig.drain({TENANT: batch})
        for worker in rig.alive_workers():
            rig.signal_worker(worker, signal.SIGTERM)
            await asyncio.to_thread(worker.process.wait_exit)
    ledger = await rig.collect({TENANT: ids})

    assert_clean(ledger)
    assert all(ledger.finals[j].status == "completed" for j in ids)
    figures(
        figures_of("worker SIGSTOP past the lease, then SIGCONT", ledger, rounds, refused=refused)
    )


def _rescued(rig: Rig, job_ids: list[str], frozen_id: str) -> int:
    """How many of `job_ids` started again on a worker other than the frozen one."""
    return len(
        {a.job_id for a in rig.read_attempts() if a.job_id in job_ids and a.worker_id != frozen_id}
    )


def _refused(rig: Rig, worker_id: str) -> int:
    return sum(1 for r in rig.read_refusals() if r.worker_id == worker_id)


async def test_poison_job_fails_alone_after_max_attempts(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    rig = make_rig()
    stop = asyncio.Event()
    keeper = asyncio.create_task(supervise(rig, 2, stop, concurrency=2))
    poison = await rig.submit_job(TENANT, payload(mode="poison"), max_attempts=3)
    others = await submit_many(rig, TENANT, scale(30, 500), payload(0.05))
    ledger = await rig.collect({TENANT: [poison, *others]}, timeout=scale(60, 600))
    stop.set()
    await keeper

    assert_clean(ledger)
    final = ledger.finals[poison]
    assert (final.status, final.attempts, final.error_code) == ("failed", 3, "ATTEMPTS_EXHAUSTED")
    assert all(ledger.finals[j].status == "completed" for j in others)
    figures(figures_of("poison job (kills its worker)", ledger, final.attempts))


async def test_heartbeat_forever_job_is_stopped_by_the_run_timeout(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    rig = make_rig()
    rig.start_worker(concurrency=2)
    stuck = await rig.submit_job(TENANT, payload(mode="forever"), max_attempts=2, run_timeout=1.5)
    others = await submit_many(rig, TENANT, scale(10, 200), payload(0.05))
    ledger = await rig.collect({TENANT: [stuck, *others]}, timeout=scale(60, 600))

    assert_clean(ledger)
    final = ledger.finals[stuck]
    assert final.status == "failed" and final.attempts == 2, final
    assert final.error_code in {"RUN_TIMEOUT", "ATTEMPTS_EXHAUSTED"}, final
    runs = [a for a in ledger.attempts if a.job_id == stuck]
    assert [a.outcome for a in runs] == ["stopped", "stopped"], runs
    assert all(ledger.finals[j].status == "completed" for j in others)
    figures(figures_of("heartbeat-forever job vs run timeout", ledger, 2, **_stops(ledger, stuck)))


def _stops(ledger: Ledger, job_id: str) -> dict[str, float]:
    """How long each attempt of the stuck job ran before the daemon stopped it."""
    runs = [a for a in ledger.attempts if a.job_id == job_id and a.end is not None]
    return {"longest_attempt_s": round(max((a.end or 0) - a.start for a in runs), 2)}
