"""Contract: retry_job (RetryJob) of single jobs and groups, its caps, fencing and audit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from store import JobNotFound, JobNotRetryable, LeaseLost, QueueFull, QuotaExceeded, Store
from store.model import ERROR_CANCELLED, Job, JobStatus, SubmitRequest
from tests.helpers import assert_eventually
from tests.store.conftest import (
    MODEL,
    TENANT,
    MakeStore,
    claim_one,
    complete,
    spec,
    submit_group,
    submit_one,
)

ADMIN = "admin:ops"


async def fail(store: Store, model: str = MODEL, code: str = "BROKEN") -> Job:
    claimed = await claim_one(store, [model])
    return await store.set_result(
        claimed.job.id, claimed.lease_id, JobStatus.FAILED, error_code=code, error_message="no"
    )


async def failed_job(store: Store, **fields: object) -> Job:
    job = await submit_one(store, **fields)  # type: ignore[arg-type]
    failed = await fail(store)
    assert failed.id == job.id
    return failed


# -- single jobs --------------------------------------------------------------


async def test_a_failed_job_goes_back_to_queued_with_its_traces_cleared(store: Store) -> None:
    job = await failed_job(store)
    retried = await store.retry_job(TENANT, job.id)
    assert retried.status is JobStatus.QUEUED
    assert (retried.attempts, retried.error_code, retried.error_message) == (0, "", "")
    assert (retried.end_time, retried.worker_id) == (None, "")
    assert retried == await store.get(TENANT, job.id)


async def test_a_cancelled_job_goes_back_to_queued(store: Store) -> None:
    job = await submit_one(store)
    await store.cancel(TENANT, job.id)
    assert (await store.retry_job(TENANT, job.id)).status is JobStatus.QUEUED


async def test_a_retried_job_is_claimed_again_with_its_payload(store: Store) -> None:
    job = await failed_job(store, payload=b"the input")
    await store.retry_job(TENANT, job.id)
    claimed = await claim_one(store)
    assert (claimed.job.id, claimed.payload, claimed.job.attempts) == (job.id, b"the input", 1)


async def test_a_retried_job_goes_to_the_back_of_its_queue(store: Store) -> None:
    job = await failed_job(store)
    behind = [await submit_one(store) for _ in range(2)]
    retried = await store.retry_job(TENANT, job.id)
    assert retried.queue_position == 2
    order = [(await claim_one(store)).job.id for _ in range(3)]
    assert order == [behind[0].id, behind[1].id, job.id]


async def test_a_retried_job_no_longer_expires(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=timedelta(seconds=0.2))
    job = await submit_one(store)
    await store.cancel(TENANT, job.id)
    await store.retry_job(TENANT, job.id)
    other = await submit_one(store, model="other")
    await store.cancel(TENANT, other.id)

    async def other_gone() -> bool:
        await store.recover()
        try:
            await store.get(TENANT, other.id)
        except JobNotFound:
            return True
        return False

    await assert_eventually(other_gone)
    assert (await store.get(TENANT, job.id)).status is JobStatus.QUEUED
    assert await store.payload(TENANT, job.id) == b"input"


async def test_a_retried_jobs_idempotency_key_still_names_it(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=timedelta(seconds=0.2))
    job = await submit_one(store, key="k1")
    await store.cancel(TENANT, job.id)
    await store.retry_job(TENANT, job.id)
    other = await submit_one(store, model="other")
    await store.cancel(TENANT, other.id)

    async def other_gone() -> bool:
        await store.recover()
        try:
            await store.get(TENANT, other.id)
        except JobNotFound:
            return True
        return False

    await assert_eventually(other_gone)
    again = await store.submit(SubmitRequest(TENANT, spec(), idempotency_key="k1"))
    assert (again.reused, again.job.id) == (True, job.id)


async def test_a_retried_job_that_completes_ends_as_usual(store: Store) -> None:
    job = await failed_job(store)
    await store.retry_job(TENANT, job.id)
    done = await complete(store, await claim_one(store), b"second try")
    assert (done.status, done.result, done.attempts) == (JobStatus.COMPLETED, b"second try", 1)


# -- what may not be retried --------------------------------------------------


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.PROCESSING, JobStatus.COMPLETED])
async def test_a_job_in_another_status_is_not_retryable(store: Store, status: JobStatus) -> None:
    job = await submit_one(store)
    if status is not JobStatus.QUEUED:
        claimed = await claim_one(store)
        if status is JobStatus.COMPLETED:
            await complete(store, claimed)
    with pytest.raises(JobNotRetryable):
        await store.retry_job(TENANT, job.id)
    assert (await store.get(TENANT, job.id)).status is status


async def test_a_group_child_alone_is_not_retryable(store: Store) -> None:
    group = await submit_group(store, 2)
    child = group.children[0]
    await store.cancel(TENANT, group.id)
    with pytest.raises(JobNotRetryable):
        await store.retry_job(TENANT, child.id)


async def test_another_tenants_job_is_not_found(store: Store) -> None:
    job = await failed_job(store)
    with pytest.raises(JobNotFound):
        await store.retry_job("globex", job.id)
    assert (await store.get(TENANT, job.id)).status is JobStatus.FAILED


async def test_any_tenant_reaches_every_tenants_job(store: Store) -> None:
    job = await failed_job(store)
    assert (await store.retry_job(None, job.id, ADMIN)).status is JobStatus.QUEUED


# -- caps ---------------------------------------------------------------------


async def test_the_tenants_live_cap_applies(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=1)
    job = await failed_job(store)
    await submit_one(store)
    with pytest.raises(QuotaExceeded) as refused:
        await store.retry_job(TENANT, job.id)
    assert refused.value.retry_after is not None
    assert (await store.get(TENANT, job.id)).status is JobStatus.FAILED


async def test_the_total_live_cap_applies(make_store: MakeStore) -> None:
    store = await make_store(max_live_total=1)
    job = await failed_job(store)
    await submit_one(store, tenant="globex")
    with pytest.raises(QueueFull):
        await store.retry_job(TENANT, job.id)


async def test_a_retried_job_counts_as_live(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=1)
    job = await failed_job(store)
    await store.retry_job(TENANT, job.id)
    with pytest.raises(QuotaExceeded):
        await submit_one(store)


async def test_a_groups_children_to_redo_count_against_the_cap(make_store: MakeStore) -> None:
    store = await make_store(max_live_per_tenant=3)
    group = await submit_group(store, 3)
    await store.cancel(TENANT, group.id)
    await submit_one(store)
    with pytest.raises(QuotaExceeded):
        await store.retry_job(TENANT, group.id)


# -- fencing ------------------------------------------------------------------


async def test_the_old_attempts_late_report_is_lease_lost(store: Store) -> None:
    job = await submit_one(store)
    old = await claim_one(store)
    await store.cancel(TENANT, job.id)
    await store.retry_job(TENANT, job.id)
    with pytest.raises(LeaseLost):
        await store.heartbeat(job.id, old.lease_id, 0.5, "")
    with pytest.raises(LeaseLost):
        await store.set_result(job.id, old.lease_id, JobStatus.COMPLETED)
    new = await claim_one(store)
    assert new.lease_id != old.lease_id
    with pytest.raises(LeaseLost):
        await store.set_result(job.id, old.lease_id, JobStatus.COMPLETED)
    done = await complete(store, new)
    assert (done.status, done.attempts) == (JobStatus.COMPLETED, 1)


async def test_an_old_repeat_of_a_recorded_failure_is_lease_lost(store: Store) -> None:
    await submit_one(store)
    old = await claim_one(store)
    await store.set_result(old.job.id, old.lease_id, JobStatus.FAILED)
    await store.retry_job(TENANT, old.job.id)
    with pytest.raises(LeaseLost):
        await store.set_result(old.job.id, old.lease_id, JobStatus.FAILED)
    assert (await store.get(TENANT, old.job.id)).status is JobStatus.QUEUED


# -- groups -------------------------------------------------------------------


async def _partial_group(store: Store, max_parallel: int = 1) -> Job:
    """A group of 3: child 0 completed, children 1 and 2 failed (PARTIAL)."""
    group = await submit_group(store, 3, max_parallel=max_parallel)
    await complete(store, await claim_one(store), b"kept")
    await fail(store)
    await fail(store)
    ended = await store.get(TENANT, group.id)
    assert ended.status is JobStatus.PARTIAL
    return ended


async def test_a_partial_groups_unfinished_children_go_back_under_max_parallel(
    store: Store,
) -> None:
    group = await _partial_group(store, max_parallel=1)
    retried = await store.retry_job(TENANT, group.id)
    assert retried.status is JobStatus.QUEUED
    assert (retried.error_code, retried.error_message, retried.end_time) == ("", "", None)
    statuses = [child.status for child in retried.children]
    assert statuses == [JobStatus.COMPLETED, JobStatus.QUEUED, JobStatus.HELD]
    children = await store.list_children(TENANT, group.id)
    assert children[0].result == b"kept"
    assert (children[1].attempts, children[1].error_code) == (0, "")


async def test_a_retried_group_ends_as_groups_do(store: Store) -> None:
    group = await _partial_group(store)
    await store.retry_job(TENANT, group.id)
    running = await claim_one(store)
    assert (await store.get(TENANT, group.id)).status is JobStatus.PROCESSING
    await complete(store, running)
    await complete(store, await claim_one(store))
    done = await store.get(TENANT, group.id)
    assert (done.status, done.progress) == (JobStatus.COMPLETED, 1.0)


async def test_a_failed_group_redoes_every_child(store: Store) -> None:
    group = await submit_group(store, 2)
    await fail(store)
    await fail(store)
    assert (await store.get(TENANT, group.id)).status is JobStatus.FAILED
    retried = await store.retry_job(TENANT, group.id)
    assert [c.status for c in retried.children] == [JobStatus.QUEUED, JobStatus.QUEUED]
    assert retried.progress == 0.0


async def test_a_cancelled_groups_running_child_runs_on(store: Store) -> None:
    group = await submit_group(store, 3, max_parallel=1)
    running = await claim_one(store)
    await store.cancel(TENANT, group.id)
    retried = await store.retry_job(TENANT, group.id)
    assert retried.status is JobStatus.PROCESSING
    assert [c.status for c in retried.children] == [
        JobStatus.PROCESSING,
        JobStatus.HELD,
        JobStatus.HELD,
    ]
    await complete(store, running)
    after = await store.get(TENANT, group.id)
    assert [c.status for c in after.children][:2] == [JobStatus.COMPLETED, JobStatus.QUEUED]


async def test_a_cancelled_group_whose_children_all_completed_is_not_retryable(
    store: Store,
) -> None:
    group = await submit_group(store, 1)
    running = await claim_one(store)
    await store.cancel(TENANT, group.id)
    await complete(store, running)
    with pytest.raises(JobNotRetryable):
        await store.retry_job(TENANT, group.id)


async def test_a_retried_groups_children_no_longer_expire(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=timedelta(seconds=0.2))
    group = await submit_group(store, 2)
    await store.cancel(TENANT, group.id)
    await store.retry_job(TENANT, group.id)
    other = await submit_one(store, model="other")
    await store.cancel(TENANT, other.id)

    async def other_gone() -> bool:
        await store.recover()
        try:
            await store.get(TENANT, other.id)
        except JobNotFound:
            return True
        return False

    await assert_eventually(other_gone)
    children = await store.list_children(TENANT, group.id)
    assert [c.status for c in children] == [JobStatus.QUEUED, JobStatus.QUEUED]


# -- audit --------------------------------------------------------------------


async def test_a_retry_is_in_the_audit_trail_naming_who_acted(store: Store) -> None:
    job = await failed_job(store)
    start = await store.newest_event_id()
    await store.retry_job(None, job.id, ADMIN)
    [event] = await store.events(after=start)
    assert (event.job_id, event.from_status, event.to_status) == (
        job.id,
        JobStatus.FAILED,
        JobStatus.QUEUED,
    )
    assert (event.actor, event.attempts, event.error_code) == (ADMIN, 0, "")


async def test_an_admins_cancel_names_who_acted(store: Store) -> None:
    group = await submit_group(store, 2)
    start = await store.newest_event_id()
    await store.cancel(None, group.id, "stop", ADMIN)
    events = await store.events(after=start)
    assert {event.actor for event in events} == {ADMIN}
    assert {event.to_status for event in events} == {JobStatus.CANCELLED}
    assert (await store.get(TENANT, group.id)).error_code == ERROR_CANCELLED


async def test_the_tenants_own_changes_name_no_actor(store: Store) -> None:
    start = await store.newest_event_id()
    job = await submit_one(store)
    await store.cancel(TENANT, job.id)
    await store.retry_job(TENANT, job.id)
    assert {event.actor for event in await store.events(after=start)} == {""}
