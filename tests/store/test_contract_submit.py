"""Contract: submit, get, idempotency, tenant isolation and admission caps."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from store import (
    IdempotencyKeyReused,
    InvalidRequest,
    JobNotFound,
    QueueFull,
    QuotaExceeded,
    Store,
)
from store.model import GroupSpec, JobKind, JobStatus, Priority, SubmitRequest
from tests.helpers import assert_eventually
from tests.store.conftest import (
    MODEL,
    TENANT,
    MakeStore,
    claim_one,
    spec,
    submit_group,
    submit_one,
)


async def test_submit_creates_a_queued_job_readable_by_get(store: Store) -> None:
    job = await submit_one(store, labels={"team": "vision"}, content_type="text/plain")
    got = await store.get(TENANT, job.id)
    assert got.status is JobStatus.QUEUED
    assert got.kind is JobKind.SINGLE
    assert (got.tenant, got.model, got.priority) == (TENANT, MODEL, Priority.BATCH)
    assert got.labels == {"team": "vision"}
    assert got.content_type == "text/plain"
    assert got.attempts == 0


async def test_payload_is_kept_apart_and_returned(store: Store) -> None:
    job = await submit_one(store, payload=b"\x00binary\xff")
    assert await store.payload(TENANT, job.id) == b"\x00binary\xff"


async def test_max_attempts_and_timeouts_default_to_settings(make_store: MakeStore) -> None:
    store = await make_store(max_attempts=5)
    job = await submit_one(store)
    assert job.max_attempts == 5
    assert job.run_timeout == store.settings.run_timeout
    assert job.queue_timeout == store.settings.queue_timeout


async def test_get_of_unknown_id_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await store.get(TENANT, "01J00000000000000000000000")


async def test_returned_snapshots_are_copies(store: Store) -> None:
    job = await submit_one(store, labels={"a": "1"})
    assert isinstance(job.labels, dict)
    job.labels["a"] = "changed"
    assert (await store.get(TENANT, job.id)).labels == {"a": "1"}


# -- idempotency --------------------------------------------------------------


async def test_same_key_and_request_returns_the_existing_job(store: Store) -> None:
    request = SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="k1")
    first = await store.submit(request)
    second = await store.submit(request)
    assert not first.reused
    assert second.reused
    assert second.job.id == first.job.id
    assert (await store.queue_depths()).get((MODEL, Priority.BATCH)) == 1


async def test_same_key_with_a_different_request_is_rejected(store: Store) -> None:
    await submit_one(store, key="k1", payload=b"one")
    with pytest.raises(IdempotencyKeyReused):
        await submit_one(store, key="k1", payload=b"two")


async def test_same_key_with_another_priority_is_a_different_request(store: Store) -> None:
    await submit_one(store, key="k1")
    with pytest.raises(IdempotencyKeyReused):
        await submit_one(store, key="k1", priority=Priority.INTERACTIVE)


async def test_no_key_never_deduplicates(store: Store) -> None:
    first = await submit_one(store)
    second = await submit_one(store)
    assert first.id != second.id


async def test_keys_are_per_tenant(store: Store) -> None:
    ours = await submit_one(store, tenant="a", key="k1")
    theirs = await submit_one(store, tenant="b", key="k1", payload=b"other")
    assert ours.id != theirs.id


async def test_reused_key_returns_the_job_in_its_current_state(store: Store) -> None:
    job = await submit_one(store, key="k1")
    await claim_one(store)
    again = await store.submit(SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="k1"))
    assert again.reused
    assert again.job.id == job.id
    assert again.job.status is JobStatus.PROCESSING


async def test_concurrent_submits_with_one_key_make_one_job(store: Store) -> None:
    request = SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="same")
    results = await asyncio.gather(*(store.submit(request) for _ in range(16)))
    assert len({result.job.id for result in results}) == 1
    assert sum(not result.reused for result in results) == 1
    assert (await store.queue_depths()).get((MODEL, Priority.BATCH)) == 1


# -- tenant isolation ----------------------------------------------------------


async def test_another_tenants_job_is_not_found_on_get(store: Store) -> None:
    job = await submit_one(store, tenant="a")
    with pytest.raises(JobNotFound):
        await store.get("b", job.id)


async def test_another_tenants_job_is_not_found_on_cancel(store: Store) -> None:
    job = await submit_one(store, tenant="a")
    with pytest.raises(JobNotFound):
        await store.cancel("b", job.id)
    assert (await store.get("a", job.id)).status is JobStatus.QUEUED


async def test_another_tenants_job_is_not_found_on_payload(store: Store) -> None:
    job = await submit_one(store, tenant="a")
    with pytest.raises(JobNotFound):
        await store.payload("b", job.id)


async def test_another_tenants_job_is_not_found_on_watch(store: Store) -> None:
    job = await submit_one(store, tenant="a")
    with pytest.raises(JobNotFound):
        async for _ in store.watch("b", job.id):
            pass


async def test_another_tenants_group_is_not_found_on_list_children(store: Store) -> None:
    group = await submit_group(store, 2, tenant="a")
    with pytest.raises(JobNotFound):
        await store.list_children("b", group.id)


# -- admission -----------------------------------------------------------------


async def test_tenant_over_its_live_cap_gets_quota_exceeded(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=2)
    await submit_one(store)
    await submit_one(store)
    with pytest.raises(QuotaExceeded):
        await submit_one(store)


async def test_tenant_cap_does_not_limit_other_tenants(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=1)
    await submit_one(store, tenant="a")
    await submit_one(store, tenant="b")


async def test_total_live_cap_gives_queue_full(make_store: MakeStore) -> None:
    store = await make_store(max_live_total=2)
    await submit_one(store, tenant="a")
    await submit_one(store, tenant="b")
    with pytest.raises(QueueFull):
        await submit_one(store, tenant="c")


async def test_finished_jobs_free_their_place_under_the_cap(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=1)
    job = await submit_one(store)
    await store.cancel(TENANT, job.id)
    await submit_one(store)


async def test_reused_submit_succeeds_even_at_the_cap(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=1)
    job = await submit_one(store, key="k1")
    again = await store.submit(SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="k1"))
    assert again.reused
    assert again.job.id == job.id


async def test_group_counts_its_children_against_the_cap(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=3)
    await submit_one(store)
    with pytest.raises(QuotaExceeded):
        await submit_group(store, 3)
    await submit_group(store, 2)


async def test_group_over_max_group_children_is_invalid(make_store: MakeStore) -> None:
    store = await make_store(max_group_children=3)
    with pytest.raises(InvalidRequest) as raised:
        await submit_group(store, 4)
    assert raised.value.field == "group.children"


async def test_a_group_at_max_group_children_is_accepted(make_store: MakeStore) -> None:
    store = await make_store(max_group_children=3)
    group = await submit_group(store, 3)
    assert len(group.children) == 3


async def test_group_request_fingerprint_covers_max_parallel(store: Store) -> None:
    children = (spec(), spec())
    await store.submit(
        SubmitRequest(tenant=TENANT, work=GroupSpec(children, max_parallel=1), idempotency_key="g")
    )
    with pytest.raises(IdempotencyKeyReused):
        await store.submit(
            SubmitRequest(
                tenant=TENANT, work=GroupSpec(children, max_parallel=2), idempotency_key="g"
            )
        )


# Every way a live job ends must give its place back exactly once: a counter
# that drifts up would one day refuse every submit, one that drifts down
# would let a tenant past its cap.


async def _recover_until_terminal(store: Store, job_id: str) -> None:
    async def ended() -> bool:
        await store.recover()
        return (await store.get(TENANT, job_id)).terminal

    await assert_eventually(ended, timeout=10)


async def _end_by_cancel_while_queued(store: Store) -> None:
    await store.cancel(TENANT, (await submit_one(store)).id)


async def _end_by_cancel_while_processing(store: Store) -> None:
    await submit_one(store)
    await store.cancel(TENANT, (await claim_one(store)).job.id)


async def _end_by_completion(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store)
    await store.set_result(claimed.job.id, claimed.lease_id, JobStatus.COMPLETED)


async def _end_by_exhausted_retries(store: Store) -> None:
    await submit_one(store, max_attempts=1)
    claimed = await claim_one(store)
    await store.set_result(claimed.job.id, claimed.lease_id, JobStatus.FAILED, retryable=True)


async def _end_by_queue_timeout(store: Store) -> None:
    job = await submit_one(store, queue_timeout=timedelta(seconds=0.05))
    await _recover_until_terminal(store, job.id)


async def _end_by_lease_expiry(store: Store) -> None:
    job = await submit_one(store, max_attempts=1)
    await claim_one(store)
    await _recover_until_terminal(store, job.id)


async def _end_by_run_timeout(store: Store) -> None:
    job = await submit_one(store, max_attempts=1, run_timeout=timedelta(seconds=0.05))
    await claim_one(store)
    await _recover_until_terminal(store, job.id)


ENDINGS = {
    "cancel-queued": _end_by_cancel_while_queued,
    "cancel-processing": _end_by_cancel_while_processing,
    "completion": _end_by_completion,
    "exhausted-retries": _end_by_exhausted_retries,
    "queue-timeout": _end_by_queue_timeout,
    "lease-expiry": _end_by_lease_expiry,
    "run-timeout": _end_by_run_timeout,
}


@pytest.mark.parametrize("ending", ENDINGS)
async def test_every_way_a_job_ends_gives_back_exactly_its_place(
    make_store: MakeStore, ending: str
) -> None:
    store = await make_store(
        max_live_per_tenant=1, max_live_total=1, lease_timeout=timedelta(seconds=0.05)
    )
    await ENDINGS[ending](store)
    await submit_one(store)
    with pytest.raises(QuotaExceeded):
        await submit_one(store)


async def test_a_cancelled_group_gives_back_its_places_as_its_children_end(
    make_store: MakeStore,
) -> None:
    store = await make_store(max_live_per_tenant=2, max_live_total=2)
    group = await submit_group(store, 2)
    running = await claim_one(store)
    await store.cancel(TENANT, group.id)
    await submit_one(store)  # the queued child's place
    with pytest.raises(QuotaExceeded):
        await submit_one(store)
    await store.set_result(running.job.id, running.lease_id, JobStatus.COMPLETED)
    await submit_one(store)  # the running child's place, once it ended
    with pytest.raises(QuotaExceeded):
        await submit_one(store)
