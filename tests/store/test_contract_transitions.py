"""Contract: every (status x operation) pair lands where the state machine says.

Each case brings a job to a status, applies one operation, and checks the
resulting status against EXPECTED and every audited step against
store.model.TRANSITIONS, so both backends are held to one table.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from store import JobCancelled, LeaseLost, Store
from store.model import TRANSITIONS, JobStatus
from tests.helpers import assert_eventually
from tests.store.conftest import (
    MODEL,
    TENANT,
    MakeStore,
    claim_one,
    submit_group,
    submit_one,
)

LEASE = timedelta(seconds=0.2)


@dataclass
class Subject:
    job_id: str
    lease_id: str = ""  # the latest lease, if the job was ever claimed


async def make_held(store: Store) -> Subject:
    group = await submit_group(store, 2, max_parallel=1, model="serial")
    return Subject(group.children[1].id)


async def make_queued(store: Store) -> Subject:
    return Subject((await submit_one(store)).id)


async def make_processing(store: Store) -> Subject:
    job = await submit_one(store)
    claimed = await claim_one(store)
    return Subject(job.id, claimed.lease_id)


async def make_completed(store: Store) -> Subject:
    subject = await make_processing(store)
    await store.set_result(subject.job_id, subject.lease_id, JobStatus.COMPLETED)
    return subject


async def make_failed(store: Store) -> Subject:
    subject = await make_processing(store)
    await store.set_result(subject.job_id, subject.lease_id, JobStatus.FAILED, error_code="E")
    return subject


async def make_cancelled(store: Store) -> Subject:
    subject = await make_processing(store)
    await store.cancel(TENANT, subject.job_id)
    return subject


SETUPS: dict[JobStatus, Callable[[Store], Awaitable[Subject]]] = {
    JobStatus.HELD: make_held,
    JobStatus.QUEUED: make_queued,
    JobStatus.PROCESSING: make_processing,
    JobStatus.COMPLETED: make_completed,
    JobStatus.FAILED: make_failed,
    JobStatus.CANCELLED: make_cancelled,
}


async def op_claim(store: Store, subject: Subject) -> None:
    await store.claim("w2", [MODEL])


async def op_complete(store: Store, subject: Subject) -> None:
    await store.set_result(subject.job_id, subject.lease_id, JobStatus.COMPLETED, b"late")


async def op_fail(store: Store, subject: Subject) -> None:
    await store.set_result(subject.job_id, subject.lease_id, JobStatus.FAILED, error_code="X")


async def op_retry(store: Store, subject: Subject) -> None:
    await store.set_result(subject.job_id, subject.lease_id, JobStatus.FAILED, retryable=True)


async def op_cancel(store: Store, subject: Subject) -> None:
    await store.cancel(TENANT, subject.job_id)


async def op_expire(store: Store, subject: Subject) -> None:
    """Let any lease run out, then recover."""
    lease_over = time.time() + LEASE.total_seconds() * 1.5

    async def recovered() -> bool:
        await store.recover()
        return time.time() > lease_over

    await assert_eventually(recovered)


OPERATIONS: dict[str, Callable[[Store, Subject], Awaitable[None]]] = {
    "claim": op_claim,
    "complete": op_complete,
    "fail": op_fail,
    "retry": op_retry,
    "cancel": op_cancel,
    "expire": op_expire,
}

# Where each status goes under each operation; a missing pair means "unchanged".
EXPECTED: dict[tuple[JobStatus, str], JobStatus] = {
    (JobStatus.HELD, "cancel"): JobStatus.CANCELLED,
    (JobStatus.QUEUED, "claim"): JobStatus.PROCESSING,
    (JobStatus.QUEUED, "cancel"): JobStatus.CANCELLED,
    (JobStatus.PROCESSING, "complete"): JobStatus.COMPLETED,
    (JobStatus.PROCESSING, "fail"): JobStatus.FAILED,
    (JobStatus.PROCESSING, "retry"): JobStatus.QUEUED,
    (JobStatus.PROCESSING, "cancel"): JobStatus.CANCELLED,
    (JobStatus.PROCESSING, "expire"): JobStatus.QUEUED,
}

CASES = [(status, operation) for status in SETUPS for operation in OPERATIONS]


@pytest.mark.parametrize(("status", "operation"), CASES, ids=[f"{s}-{o}" for s, o in CASES])
async def test_operation_moves_status_as_the_state_machine_says(
    make_store: MakeStore, status: JobStatus, operation: str
) -> None:
    store = await make_store(lease_timeout=LEASE, retry_backoff_base=timedelta(seconds=30))
    subject = await SETUPS[status](store)
    assert (await store.get(TENANT, subject.job_id)).status is status
    position = (await store.events(count=10_000))[-1].id
    # Stale leases and cancelled jobs answer with these errors; the status check decides.
    with contextlib.suppress(LeaseLost, JobCancelled):
        await OPERATIONS[operation](store, subject)
    after = (await store.get(TENANT, subject.job_id)).status
    assert after is EXPECTED.get((status, operation), status)
    steps = [
        (event.from_status, event.to_status)
        for event in await store.events(after=position, count=10_000)
        if event.job_id == subject.job_id
    ]
    for before, to in steps:
        assert to in TRANSITIONS[before], f"illegal step {before} -> {to}"
    assert len(steps) == (0 if after is status else 1)
