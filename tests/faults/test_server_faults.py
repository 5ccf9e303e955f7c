"""Server faults: a gateway SIGKILLed with Submits in flight (keyed retries land on the
other replica), and a rolling SIGTERM restart of every process under load."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import pytest

from tests.e2e.harness import restart_process
from tests.faults.conftest import RigFactory, Scale
from tests.faults.rig import Figures, Load, assert_clean, figures_of, payload, until

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT = "acme"


async def test_gateway_sigkill_with_submits_in_flight(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    rig = make_rig(gateways=2)
    for _ in range(2):
        rig.start_worker(concurrency=4)
    kills = scale(2, 20)
    gateway = rig.deployment.processes[0]
    assert gateway.name == "gateway-0"
    # Every Submit tries gateway-0 first; a failed one is retried, same key, on gateway-1.
    async with Load(rig, TENANT, payload(0.02), parallel=8, first=0) as load:
        for round_ in range(kills):
            target = len(rig.accepted) + 50
            assert await until(lambda: len(rig.accepted) >= target, 60)  # noqa: B023
            gateway.kill()
            await asyncio.sleep(0.5)  # Submits keep coming, through gateway-1 only
            if round_ + 1 < kills:
                await asyncio.to_thread(restart_process, gateway)
    ids = load.ids
    ledger = await rig.collect({TENANT: ids}, timeout=scale(60, 600))

    assert_clean(ledger)
    assert len(set(ids)) == len(ids)
    retried = sum(1 for c in ledger.calls if c.method == "Submit" and c.code != "OK")
    figures(
        figures_of(
            "gateway SIGKILL, keyed retries on the other replica",
            ledger,
            kills,
            submits_retried=retried,
        )
    )


async def test_rolling_sigterm_restart_of_every_server_under_load(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    rig = make_rig(gateways=2, worker_servers=2, settings={"lease-timeout": "2"})
    for _ in range(3):
        rig.start_worker(concurrency=4)
    rounds = scale(1, 5)
    restarts = 0
    async with Load(rig, TENANT, payload(0.05)) as load:
        for _ in range(rounds):
            for process in rig.deployment.processes:
                assert await asyncio.to_thread(process.terminate) == 0, process.log_tail()
                await asyncio.to_thread(restart_process, process)
                restarts += 1
            for worker in list(rig.alive_workers()):
                rig.signal_worker(worker, signal.SIGTERM)
                assert await asyncio.to_thread(worker.process.wait_exit) == 0
                rig.start_worker(concurrency=4)
                restarts += 1
    ids = load.ids
    ledger = await rig.collect({TENANT: ids}, timeout=scale(60, 600))

    assert_clean(ledger)
    failed = [j for j in ids if ledger.finals[j].status != "completed"]
    assert failed == [], [ledger.finals[j] for j in failed]
    figures(figures_of("rolling SIGTERM restart of every server", ledger, restarts))
