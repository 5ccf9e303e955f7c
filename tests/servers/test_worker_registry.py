"""The worker-server's registry: noted per call, written in batches at most once a second."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from store.errors import StoreUnavailable
from store.memory import LocalStore
from store.model import StoreSettings, WorkerSighting
from tests.fake_clock import FakeClock
from tests.helpers import assert_eventually
from worker_server.registry import FLUSH_INTERVAL, WorkerRegistry


class SightingStore(LocalStore):
    """A LocalStore that keeps every batch record_workers wrote (and fails on demand)."""

    def __init__(self) -> None:
        super().__init__(StoreSettings())
        self.batches: list[list[WorkerSighting]] = []
        self.failing = False

    async def record_workers(self, seen: Sequence[WorkerSighting]) -> None:
        if self.failing:
            raise StoreUnavailable("down")
        self.batches.append(list(seen))
        await super().record_workers(seen)


@pytest.fixture
async def store() -> SightingStore:
    store = SightingStore()
    await store.open()
    return store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry(store: SightingStore, clock: FakeClock) -> WorkerRegistry:
    return WorkerRegistry(store, clock=clock, sleep=clock.sleep)


async def batches(store: SightingStore, count: int) -> list[list[WorkerSighting]]:
    async def written() -> bool:
        return len(store.batches) >= count

    await assert_eventually(written, message=f"fewer than {count} registry writes")
    return store.batches


async def test_the_first_call_after_an_idle_spell_is_written_at_once(
    registry: WorkerRegistry, store: SightingStore
) -> None:
    registry.saw("w1", "gpu", ["m"])
    [[sighting]] = await batches(store, 1)
    assert (sighting.worker_id, sighting.pool, sighting.models) == ("w1", "gpu", ("m",))


async def test_calls_within_the_interval_become_one_write_for_all_workers(
    registry: WorkerRegistry, store: SightingStore, clock: FakeClock
) -> None:
    registry.saw("w0", "gpu", ["m"])
    await batches(store, 1)
    for _ in range(10):
        clock.advance(FLUSH_INTERVAL / 20)
        for worker in ("w1", "w2", "w1"):
            registry.saw(worker, "gpu", ["m"])
    assert len(store.batches) == 1  # not before the interval is over
    clock.advance(FLUSH_INTERVAL)
    written = await batches(store, 2)
    assert sorted(s.worker_id for s in written[1]) == ["w1", "w2"]


async def test_a_sighting_carries_how_long_ago_the_call_came(
    registry: WorkerRegistry, store: SightingStore, clock: FakeClock
) -> None:
    registry.saw("w0", "gpu", ["m"])
    await batches(store, 1)
    clock.advance(0.25)
    registry.touched("w1")
    clock.advance(FLUSH_INTERVAL)
    [sighting] = (await batches(store, 2))[1]
    assert sighting.age == timedelta(seconds=FLUSH_INTERVAL)


async def test_a_touch_says_no_pool_so_the_store_keeps_the_recorded_one(
    registry: WorkerRegistry, store: SightingStore
) -> None:
    registry.touched("w1")
    [[sighting]] = await batches(store, 1)
    assert (sighting.worker_id, sighting.pool) == ("w1", None)


async def test_a_touch_after_a_written_claim_does_not_state_the_pool_again(
    registry: WorkerRegistry, store: SightingStore, clock: FakeClock
) -> None:
    registry.saw("w1", "gpu", ["m"])
    await batches(store, 1)
    registry.touched("w1")
    clock.advance(FLUSH_INTERVAL)
    [sighting] = (await batches(store, 2))[1]
    assert sighting.pool is None


async def test_an_unnamed_worker_is_not_noted(
    registry: WorkerRegistry, store: SightingStore
) -> None:
    registry.touched("")
    assert len(registry) == 0


async def test_nothing_is_written_while_nobody_calls(
    registry: WorkerRegistry, store: SightingStore, clock: FakeClock
) -> None:
    registry.saw("w1", "gpu", ["m"])
    await batches(store, 1)
    clock.advance(10 * FLUSH_INTERVAL)
    assert await registry.flush()
    assert len(store.batches) == 1


async def test_a_failed_write_is_made_by_the_next_flush(
    registry: WorkerRegistry, store: SightingStore, clock: FakeClock
) -> None:
    store.failing = True
    registry.saw("w1", "gpu", ["m"])

    async def tried() -> bool:
        return registry.flushes == 1

    await assert_eventually(tried)
    store.failing = False
    clock.advance(FLUSH_INTERVAL)
    registry.touched("w2")
    written = await batches(store, 1)
    assert sorted(s.worker_id for s in written[0]) == ["w1", "w2"]


async def test_a_worker_silent_for_120_s_is_forgotten(
    registry: WorkerRegistry, store: SightingStore, clock: FakeClock
) -> None:
    registry.saw("w1", "gpu", ["m"])
    await batches(store, 1)
    clock.advance(121)
    await registry.flush()
    assert len(registry) == 0


async def test_close_stops_a_pending_flush(registry: WorkerRegistry, store: SightingStore) -> None:
    registry.saw("w1", "gpu", ["m"])
    await batches(store, 1)
    registry.saw("w1", "gpu", ["m"])  # its flush waits for the fake clock
    await registry.close()
    assert len(store.batches) == 1
