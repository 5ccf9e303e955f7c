"""Contract: result TTL — terminal jobs expire, live jobs never do, groups expire together."""

from __future__ import annotations

from datetime import timedelta

import pytest

from store import JobNotFound, Store
from store.model import JobStatus, SubmitRequest
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

SHORT_TTL = timedelta(seconds=0.3)


async def gone(store: Store, job_id: str) -> None:
    """Wait until the job's record is gone (recover() also sweeps what expired)."""

    async def not_found() -> bool:
        await store.recover()
        try:
            await store.get(TENANT, job_id)
        except JobNotFound:
            return True
        return False

    await assert_eventually(not_found)


async def test_a_terminal_job_is_gone_after_result_ttl(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=SHORT_TTL)
    job = await submit_one(store)
    await complete(store, await claim_one(store))
    assert (await store.get(TENANT, job.id)).status is JobStatus.COMPLETED
    await gone(store, job.id)
    with pytest.raises(JobNotFound):
        await store.payload(TENANT, job.id)


async def test_a_live_job_never_expires(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=SHORT_TTL)
    queued = await submit_one(store)
    await submit_one(store, model="busy")
    processing = (await claim_one(store, models=["busy"])).job
    finished = await submit_one(store, model="done")
    await complete(store, await claim_one(store, models=["done"]))
    # Once a job finished together with them has expired, the live ones must remain.
    await gone(store, finished.id)
    assert await store.payload(TENANT, queued.id) == b"input"
    assert (await store.get(TENANT, queued.id)).status is JobStatus.QUEUED
    assert (await store.get(TENANT, processing.id)).status is JobStatus.PROCESSING


async def test_an_expired_key_can_be_used_again(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=SHORT_TTL)
    first = await submit_one(store, key="k1")
    await store.cancel(TENANT, first.id)
    await gone(store, first.id)
    second = await store.submit(SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="k1"))
    assert not second.reused
    assert second.job.id != first.id


async def test_a_live_jobs_key_does_not_expire(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=SHORT_TTL)
    first = await submit_one(store, key="k1")
    finished = await submit_one(store, model="done")
    await store.cancel(TENANT, finished.id)
    await gone(store, finished.id)
    again = await store.submit(SubmitRequest(tenant=TENANT, work=spec(), idempotency_key="k1"))
    assert again.reused
    assert again.job.id == first.id


async def test_finished_children_live_as_long_as_their_running_group(
    make_store: MakeStore,
) -> None:
    store = await make_store(result_ttl=SHORT_TTL)
    group = await submit_group(store, 2, max_parallel=1)
    await complete(store, await claim_one(store))
    finished = await submit_one(store, model="done")
    await store.cancel(TENANT, finished.id)
    await gone(store, finished.id)
    first_child = await store.get(TENANT, group.children[0].id)
    assert first_child.status is JobStatus.COMPLETED


async def test_a_groups_children_expire_with_the_parent(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=SHORT_TTL)
    group = await submit_group(store, 2)
    for claimed in await store.claim("w1", [MODEL], max_jobs=2):
        await complete(store, claimed)
    await gone(store, group.id)
    for child in group.children:
        with pytest.raises(JobNotFound):
            await store.get(TENANT, child.id)


async def test_a_cancelled_group_waits_for_its_running_children_to_expire(
    make_store: MakeStore,
) -> None:
    store = await make_store(result_ttl=SHORT_TTL)
    group = await submit_group(store, 2)
    running = await claim_one(store)
    await store.cancel(TENANT, group.id)
    finished = await submit_one(store, model="done")
    await store.cancel(TENANT, finished.id)
    await gone(store, finished.id)
    assert (await store.get(TENANT, group.id)).status is JobStatus.CANCELLED
    await complete(store, running)
    await gone(store, group.id)
