"""Move the partition's slot to another master, key batch by key batch, while jobs flow
through real servers and `jobgate worker` daemons.

While the slot is split between two masters, Redis answers a call ASK (its
keys moved) or TRYAGAIN (some moved, some not) before running it; DESIGN
("Redis topologies") requires that every script's keys be in KEYS so that a
script never runs halfway on either side. So every call either completes or
fails (UNAVAILABLE, retried by the client) before writing anything, and the
fault harness's ledger checks hold: nothing accepted is lost, nothing runs
twice at once, counters add up.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.cluster.conftest import ClusterRigFactory, scaled
from tests.cluster.rig import ClusterRig
from tests.cluster_servers import ClusterDeployment, SlotMigration
from tests.faults.rig import Load, assert_clean, figures_of, payload, until

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT = "acme"
BATCH = 10


async def migrate_under_load(rig: ClusterRig) -> float:
    """Move the partition's slot to the next master; seconds the move took."""
    cluster = rig.cluster
    source = cluster.owner(rig.slot)
    target = next(node for node in cluster.primaries() if node is not source)
    migration = SlotMigration(cluster, rig.slot, target)
    started = time.monotonic()
    await asyncio.to_thread(migration.begin)
    while await asyncio.to_thread(migration.move_batch, BATCH):
        # Let a few calls meet the split slot before the next batch moves.
        calls = len(rig.calls)
        assert await until(lambda: len(rig.calls) >= calls + 3, 30)  # noqa: B023
    await asyncio.to_thread(migration.finish)
    assert cluster.owner(rig.slot) is target
    return time.monotonic() - started


async def test_partition_slot_migrated_under_load_every_call_completes_or_fails_before_writing(
    own_cluster: ClusterDeployment, make_cluster_rig: ClusterRigFactory
) -> None:
    rig = make_cluster_rig(own_cluster)
    for _ in range(2):
        rig.start_worker(concurrency=4)
    moves = scaled(1, 10)
    durations: list[float] = []
    started = time.time()
    async with Load(rig, TENANT, payload(0.05), parallel=6) as load:
        for _ in range(moves):
            target = len(rig.accepted) + 40
            assert await until(lambda: len(rig.accepted) >= target, 60)  # noqa: B023
            durations.append(await migrate_under_load(rig))
        target = len(rig.accepted) + 40  # the new master takes the load
        assert await until(lambda: len(rig.accepted) >= target, 60)
    ledger = await rig.collect({TENANT: load.ids}, timeout=scaled(90, 900))

    figure = figures_of("Cluster slot migration", ledger, moves)
    print(
        f"\nCLUSTER SLOT MIGRATION x{moves}: {max(durations):.2f} s at most per move, "
        f"longest time without a successful Submit {rig.longest_gap('Submit'):.2f} s; "
        f"{figure.jobs} jobs, lost={figure.lost} doubled={figure.doubled} "
        f"failed calls={rig.failed_calls(started)}"
    )
    assert_clean(ledger)
    assert figure.lost == 0
    assert set(rig.failed_calls(started)) <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
