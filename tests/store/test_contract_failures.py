"""Contract: a store reports each failed operation to `on_failure`, by the Store method's name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from store import JobNotFound, LeaseLost, Store, StoreUnavailable
from store.model import JobStatus, ResultReport
from tests.store.conftest import MODEL, TENANT, claim_one, submit_one

UNKNOWN = "01J00000000000000000000000"


def record_failures(store: Store) -> list[str]:
    failed: list[str] = []
    store.on_failure = failed.append
    return failed


CLOSED_CALLS: dict[str, Callable[[Store], Awaitable[object]]] = {
    "get": lambda store: store.get(TENANT, UNKNOWN),
    "list_children": lambda store: store.list_children(TENANT, UNKNOWN),
    "claim": lambda store: store.claim("w1", [MODEL]),
    "set_result": lambda store: store.record_result(
        UNKNOWN, "lease", ResultReport(JobStatus.COMPLETED)
    ),
    "recover": lambda store: store.recover(),
    "events": lambda store: store.events(),
    "newest_event_id": lambda store: store.newest_event_id(),
    "queue_depths": lambda store: store.queue_depths(),
}


@pytest.mark.parametrize("operation", sorted(CLOSED_CALLS))
async def test_a_closed_store_reports_the_failed_operation(store: Store, operation: str) -> None:
    failed = record_failures(store)
    await store.close()
    with pytest.raises(StoreUnavailable):
        await CLOSED_CALLS[operation](store)
    assert failed == [operation]


async def test_a_closed_store_reports_a_failed_watch_as_watch(store: Store) -> None:
    failed = record_failures(store)
    await store.close()
    with pytest.raises(StoreUnavailable):
        async for _ in store.watch(TENANT, UNKNOWN):
            pass
    assert failed == ["watch"]


async def test_a_domain_answer_is_not_reported_as_a_failure(store: Store) -> None:
    failed = record_failures(store)
    job = await submit_one(store)
    claimed = await claim_one(store)
    with pytest.raises(JobNotFound):
        await store.get(TENANT, UNKNOWN)
    with pytest.raises(LeaseLost):
        await store.heartbeat(job.id, "not-the-lease", 0.5, "")
    await store.heartbeat(job.id, claimed.lease_id, 0.5, "")
    assert failed == []
