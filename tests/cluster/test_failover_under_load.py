"""Kill -9 the master serving the partition's slot while jobs flow through real servers
and `jobgate worker` daemons; its replica takes over.

The fault harness's ledger checks hold across it (tests/faults/ledger.py): every
accepted job ends in one terminal state, none is lost, no lease is held twice
at once, attempts and live counters add up. Calls meanwhile fail only as
UNAVAILABLE (or time out), and serving resumes: the time from the kill to the
first Submit that succeeded after it is printed (docs/cluster.md records it).
"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from tests.cluster.conftest import ClusterRigFactory, scaled
from tests.cluster.rig import ClusterRig
from tests.cluster_servers import ClusterDeployment
from tests.faults.rig import Load, assert_clean, figures_of, payload, until
from tests.timings import Timings

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT = "acme"
RECOVERY_BOUND = 30.0


async def fail_over(rig: ClusterRig) -> tuple[float, float]:
    """Kill the partition's master; (seconds until a replica serves the slot,
    seconds until a Submit started after the kill succeeded)."""
    cluster = rig.cluster
    owner = cluster.owner(rig.slot)
    killed_at = time.time()
    cluster.kill(owner)
    promoted = await asyncio.to_thread(cluster.wait_promoted, rig.slot, owner)
    assert await until(
        lambda: rig.first_success_after("Submit", killed_at) is not None, RECOVERY_BOUND
    ), "no Submit succeeded after the failover"
    back = rig.first_success_after("Submit", killed_at)
    assert back is not None
    # The old master comes back as a replica of the promoted one, so the
    # next kill (soak) still has a replica to promote.
    await asyncio.to_thread(owner.start)
    await asyncio.to_thread(cluster.wait_ready)
    return promoted, back - killed_at


async def test_partition_master_killed_under_load_loses_nothing_and_runs_nothing_twice(
    timings: Timings, replicated_cluster: ClusterDeployment, make_cluster_rig: ClusterRigFactory
) -> None:
    rig = make_cluster_rig(replicated_cluster)
    for _ in range(2):
        rig.start_worker(concurrency=4)
    kills = scaled(1, 10)
    promotions: list[float] = []
    serving_again: list[float] = []
    started = time.time()
    async with Load(rig, TENANT, payload(0.05), parallel=6) as load:
        for _ in range(kills):
            target = len(rig.accepted) + 40
            assert await until(lambda: len(rig.accepted) >= target, 60)  # noqa: B023
            promoted, back = await fail_over(rig)
            promotions.append(promoted)
            serving_again.append(back)
        target = len(rig.accepted) + 40  # the new master takes the load too
        assert await until(lambda: len(rig.accepted) >= target, 60)
    ledger = await rig.collect({TENANT: load.ids}, timeout=scaled(90, 900))

    figure = figures_of("Cluster master kill -9", ledger, kills)
    print(
        f"\nCLUSTER FAILOVER x{kills}: replica serving the slot after "
        f"{statistics.median(promotions):.2f} s (max {max(promotions):.2f}), Submit back after "
        f"{statistics.median(serving_again):.2f} s (max {max(serving_again):.2f}); "
        f"longest time without a successful Submit {rig.longest_gap('Submit'):.2f} s; "
        f"{figure.jobs} jobs, lost={figure.lost} doubled={figure.doubled} "
        f"failed calls={rig.failed_calls(started)}"
    )
    assert_clean(ledger)
    assert figure.lost == 0
    assert set(rig.failed_calls(started)) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
    # Each Submit came back (fail_over waits, RECOVERY_BOUND at most); how soon is the bench's.
    timings("failover: Submit serving again", max(serving_again), "Redis Cluster master kill -9")
