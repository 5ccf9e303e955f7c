"""report_and_claim: results end as record_result would, then the next jobs are claimed, at once."""

from __future__ import annotations

from store import Store
from store.errors import JobCancelled, JobNotFound, LeaseLost
from store.model import ClaimedJob, JobStatus, LeaseResult, ResultReport
from tests.store.conftest import MODEL, TENANT, claim_one, submit_group, submit_one

UNKNOWN_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def done(claimed: ClaimedJob, result: bytes = b"ok") -> LeaseResult:
    return (claimed.job.id, claimed.lease_id, ResultReport(JobStatus.COMPLETED, result))


async def test_a_result_and_the_next_claim_happen_in_one_call(store: Store) -> None:
    first = await submit_one(store)
    second = await submit_one(store)
    claimed = await claim_one(store)
    step = await store.report_and_claim("w1", [MODEL], [done(claimed, b"out")], 1)
    [answer] = step.results
    assert answer.recorded is not None and answer.recorded.applied
    assert answer.recorded.job.status is JobStatus.COMPLETED
    assert [c.job.id for c in step.claimed] == [second.id]
    assert step.claimed[0].job.status is JobStatus.PROCESSING
    stored = await store.get(TENANT, first.id)
    assert (stored.status, stored.result) == (JobStatus.COMPLETED, b"out")


async def test_several_results_are_answered_in_order(store: Store) -> None:
    for _ in range(3):
        await submit_one(store)
    claimed = await store.claim("w1", [MODEL], max_jobs=3)
    results = [done(c) for c in reversed(claimed)]
    step = await store.report_and_claim("w1", [MODEL], results, 0)
    assert [a.job_id for a in step.results] == [r[0] for r in results]
    assert all(a.recorded is not None and a.recorded.applied for a in step.results)
    assert step.claimed == []


async def test_a_stale_lease_is_refused_alone(store: Store) -> None:
    await submit_one(store)
    await submit_one(store)
    good, stale = await store.claim("w1", [MODEL], max_jobs=2)
    stale_result = (stale.job.id, "not-the-lease", ResultReport(JobStatus.COMPLETED))
    step = await store.report_and_claim("w1", [MODEL], [stale_result, done(good)], 0)
    assert isinstance(step.results[0].refused, LeaseLost)
    assert step.results[0].recorded is None
    assert step.results[1].recorded is not None
    assert (await store.get(TENANT, stale.job.id)).status is JobStatus.PROCESSING
    assert (await store.get(TENANT, good.job.id)).status is JobStatus.COMPLETED


async def test_a_cancelled_job_and_an_unknown_job_are_refused(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    await store.cancel(TENANT, job.id)
    unknown = (UNKNOWN_ID, "lease", ResultReport(JobStatus.COMPLETED))
    step = await store.report_and_claim("w1", [MODEL], [done(claimed), unknown], 0)
    assert isinstance(step.results[0].refused, JobCancelled)
    assert isinstance(step.results[1].refused, JobNotFound)


async def test_a_repeated_result_is_not_applied_twice(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store)
    await store.report_and_claim("w1", [MODEL], [done(claimed)], 0)
    again = await store.report_and_claim("w1", [MODEL], [done(claimed)], 0)
    assert again.results[0].recorded is not None
    assert not again.results[0].recorded.applied


async def test_the_same_result_twice_in_one_call_is_applied_once(store: Store) -> None:
    await submit_one(store)
    claimed = await claim_one(store)
    step = await store.report_and_claim("w1", [MODEL], [done(claimed), done(claimed)], 0)
    recorded = [answer.recorded for answer in step.results]
    assert [r.applied for r in recorded if r is not None] == [True, False]


async def test_a_retryable_failure_requeues_and_the_claim_skips_its_backoff(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    report = ResultReport(JobStatus.FAILED, error_code="GPU_BUSY", retryable=True)
    step = await store.report_and_claim("w1", [MODEL], [(job.id, claimed.lease_id, report)], 1)
    assert step.results[0].recorded is not None
    assert step.results[0].recorded.job.status is JobStatus.QUEUED
    assert step.claimed == []  # still backing off


async def test_a_childs_result_releases_the_next_held_child_for_the_same_claim(
    store: Store,
) -> None:
    await submit_group(store, 2, max_parallel=1)
    first = await claim_one(store)
    step = await store.report_and_claim("w1", [MODEL], [done(first)], 1)
    assert [c.job.child_index for c in step.claimed] == [1]


async def test_no_results_and_no_claim_is_an_empty_step(store: Store) -> None:
    await submit_one(store)
    step = await store.report_and_claim("w1", [MODEL], [], 0)
    assert (step.results, step.claimed) == ([], [])
    assert len(await store.claim("w1", [MODEL])) == 1  # nothing was claimed


async def test_the_claim_is_capped_and_takes_claim_order(store: Store) -> None:
    ids = [(await submit_one(store)).id for _ in range(3)]
    step = await store.report_and_claim("w1", [MODEL], [], 2)
    assert [c.job.id for c in step.claimed] == ids[:2]
    assert len({c.lease_id for c in step.claimed}) == 2
