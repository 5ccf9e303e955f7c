"""Contract: list_jobs (ListJobs) on every backend: order, scope, filters, pages, stability, TTL."""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta

from store import Store
from store.listing import EXAMINE_FACTOR, key_of
from store.model import (
    FilterTerm,
    FilterValue,
    Job,
    JobFilter,
    JobKind,
    JobStatus,
    ListCursor,
    Priority,
    SubmitRequest,
)
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

OTHER = "globex"
EVERY_JOB = JobFilter()


def where(*terms: tuple[str, FilterValue] | tuple[str, str, FilterValue]) -> JobFilter:
    """A filter of (field, value) equalities or (field, op, value) comparisons."""
    return JobFilter(
        tuple(FilterTerm(t[0], "=", t[1]) if len(t) == 2 else FilterTerm(*t) for t in terms)
    )


async def walk(
    store: Store,
    tenant: str | None = TENANT,
    job_filter: JobFilter = EVERY_JOB,
    page_size: int = 2,
) -> list[Job]:
    """Every job of a whole walk, page after page."""
    listed: list[Job] = []
    after: ListCursor | None = None
    for _ in range(10_000):
        page = await store.list_jobs(tenant, job_filter, after, page_size)
        assert len(page.jobs) <= page_size
        listed += page.jobs
        if page.next is None:
            return listed
        after = page.next
    raise AssertionError("the walk did not end")


def ids(jobs: list[Job]) -> list[str]:
    return [job.id for job in jobs]


def newest_first(jobs: list[Job]) -> list[str]:
    return [job.id for job in sorted(jobs, key=key_of, reverse=True)]


async def failed_job(store: Store, **fields: object) -> Job:
    await submit_one(store, model="to-fail", **fields)  # type: ignore[arg-type]
    claimed = await claim_one(store, ["to-fail"])
    return await store.set_result(claimed.job.id, claimed.lease_id, JobStatus.FAILED)


# -- order and pages ----------------------------------------------------------


async def test_a_walk_lists_every_job_of_the_tenant_newest_first(store: Store) -> None:
    jobs = [await submit_one(store) for _ in range(7)]
    assert ids(await walk(store)) == newest_first(jobs)


async def test_the_last_page_has_no_cursor(store: Store) -> None:
    jobs = [await submit_one(store) for _ in range(3)]
    page = await store.list_jobs(TENANT, JobFilter(), None, 3)
    assert (ids(page.jobs), page.next) == (newest_first(jobs), None)


async def test_a_page_before_the_end_has_a_cursor_after_its_last_job(store: Store) -> None:
    jobs = [await submit_one(store) for _ in range(3)]
    page = await store.list_jobs(TENANT, JobFilter(), None, 2)
    assert page.next is not None
    assert page.next.job_id == newest_first(jobs)[1]


async def test_a_cursor_resumes_after_the_job_it_names(store: Store) -> None:
    jobs = [await submit_one(store) for _ in range(4)]
    order = newest_first(jobs)
    anchor = next(job for job in jobs if job.id == order[1])
    cursor = ListCursor(create_time=anchor.create_time, job_id=anchor.id)
    page = await store.list_jobs(TENANT, JobFilter(), cursor, 10)
    assert ids(page.jobs) == order[2:]


async def test_an_empty_store_lists_nothing(store: Store) -> None:
    page = await store.list_jobs(TENANT, JobFilter(), None, 10)
    assert (page.jobs, page.next) == ([], None)


async def test_listed_jobs_carry_no_result_children_or_position(store: Store) -> None:
    await submit_one(store)
    await complete(store, await claim_one(store), b"the result")
    await submit_group(store, 2)
    await submit_one(store)
    listed = await walk(store, page_size=10)
    assert {(job.result, job.children, job.queue_position) for job in listed} == {(b"", (), None)}


async def test_a_listed_job_has_the_fields_get_answers(store: Store) -> None:
    job = await submit_one(store, labels={"team": "search"}, content_type="text/plain")
    [listed] = await walk(store)
    got = await store.get(TENANT, job.id)
    assert listed == dataclasses.replace(got, queue_position=None)


# -- scope --------------------------------------------------------------------


async def test_another_tenants_jobs_are_not_listed(store: Store) -> None:
    mine = await submit_one(store)
    await submit_one(store, tenant=OTHER)
    assert ids(await walk(store)) == [mine.id]


async def test_every_tenants_jobs_are_listed_for_no_tenant(store: Store) -> None:
    jobs = [await submit_one(store), await submit_one(store, tenant=OTHER)]
    jobs.append(await submit_one(store, tenant="initech"))
    assert ids(await walk(store, None)) == newest_first(jobs)


async def test_a_tenant_term_narrows_an_every_tenant_walk(store: Store) -> None:
    await submit_one(store)
    theirs = await submit_one(store, tenant=OTHER)
    assert ids(await walk(store, None, where(("tenant", OTHER)))) == [theirs.id]


async def test_a_tenant_term_naming_another_tenant_lists_nothing(store: Store) -> None:
    await submit_one(store, tenant=OTHER)
    assert await walk(store, TENANT, where(("tenant", OTHER))) == []


# -- the indexed filters ------------------------------------------------------


async def test_a_status_filter_lists_the_jobs_in_that_status(store: Store) -> None:
    queued = [await submit_one(store) for _ in range(3)]
    failed = await failed_job(store)
    assert ids(await walk(store, job_filter=where(("status", JobStatus.FAILED)))) == [failed.id]
    listed = await walk(store, job_filter=where(("status", JobStatus.QUEUED)))
    assert ids(listed) == newest_first(queued)


async def test_a_job_moves_between_status_filters_with_its_status(store: Store) -> None:
    job = await submit_one(store)
    claimed = await claim_one(store)
    processing = await walk(store, job_filter=where(("status", JobStatus.PROCESSING)))
    assert ids(processing) == [job.id]
    assert await walk(store, job_filter=where(("status", JobStatus.QUEUED))) == []
    await complete(store, claimed)
    assert await walk(store, job_filter=where(("status", JobStatus.PROCESSING))) == []
    completed = await walk(store, job_filter=where(("status", JobStatus.COMPLETED)))
    assert ids(completed) == [job.id]


async def test_a_model_filter_lists_the_jobs_of_that_model(store: Store) -> None:
    await submit_one(store, model="other")
    wanted = [await submit_one(store, model="wanted") for _ in range(3)]
    assert ids(await walk(store, job_filter=where(("model", "wanted")))) == newest_first(wanted)


async def test_a_model_filter_lists_every_tenants_jobs_of_that_model_for_no_tenant(
    store: Store,
) -> None:
    jobs = [await submit_one(store, model="wanted")]
    jobs.append(await submit_one(store, tenant=OTHER, model="wanted"))
    await submit_one(store, tenant=OTHER, model="other")
    assert ids(await walk(store, None, where(("model", "wanted")))) == newest_first(jobs)


async def test_a_kind_filter_lists_the_jobs_of_that_kind(store: Store) -> None:
    single = await submit_one(store)
    group = await submit_group(store, 2)
    assert ids(await walk(store, job_filter=where(("kind", JobKind.SINGLE)))) == [single.id]
    assert ids(await walk(store, job_filter=where(("kind", JobKind.GROUP)))) == [group.id]
    children = await walk(store, job_filter=where(("kind", JobKind.CHILD)))
    assert sorted(ids(children)) == sorted(child.id for child in group.children)


async def test_a_status_and_kind_filter_lists_what_holds_both(store: Store) -> None:
    await submit_one(store)
    group = await submit_group(store, 3, max_parallel=1)
    held = await walk(store, job_filter=where(("kind", JobKind.CHILD), ("status", JobStatus.HELD)))
    assert sorted(ids(held)) == sorted(c.id for c in group.children if c.child_index > 0)


async def test_a_parent_filter_lists_the_groups_children_newest_first(store: Store) -> None:
    group = await submit_group(store, 5)
    await submit_group(store, 2)
    listed = await walk(store, job_filter=where(("parent_id", group.id)), page_size=2)
    assert [job.child_index for job in listed] == [4, 3, 2, 1, 0]
    assert ids(listed) == newest_first(listed)


async def test_a_parent_filter_of_another_tenants_group_lists_nothing(store: Store) -> None:
    group = await submit_group(store, 2, tenant=OTHER)
    assert await walk(store, job_filter=where(("parent_id", group.id))) == []
    assert len(await walk(store, None, where(("parent_id", group.id)))) == 2


async def test_a_parent_filter_of_an_unknown_job_lists_nothing(store: Store) -> None:
    assert await walk(store, job_filter=where(("parent_id", "01ARZ3NDEKTSV4RRFFQ69G5FAV"))) == []


async def test_create_time_bounds_list_the_jobs_inside_them(store: Store) -> None:
    jobs = [await submit_one(store) for _ in range(3)]
    first, last = min(jobs, key=key_of), max(jobs, key=key_of)
    after_first = where(("create_time", ">", first.create_time))
    assert first.id not in ids(await walk(store, job_filter=after_first))
    window = where(
        ("create_time", ">=", first.create_time), ("create_time", "<=", last.create_time)
    )
    assert ids(await walk(store, job_filter=window)) == newest_first(jobs)
    before = where(("create_time", "<", first.create_time - timedelta(milliseconds=1)))
    assert await walk(store, job_filter=before) == []


# -- terms checked job by job -------------------------------------------------


async def test_a_label_filter_lists_the_jobs_with_that_label(store: Store) -> None:
    await submit_one(store, labels={"team": "ads"})
    wanted = await submit_one(store, labels={"team": "search"})
    assert ids(await walk(store, job_filter=where(("labels.team", "search")))) == [wanted.id]


async def test_priority_pool_and_error_code_filters_list_what_matches(store: Store) -> None:
    urgent = (
        await store.submit(
            SubmitRequest(TENANT, spec(pool="onprem"), priority=Priority.INTERACTIVE)
        )
    ).job
    await submit_one(store)
    failed = await failed_job(store)
    by_priority = await walk(store, job_filter=where(("priority", Priority.INTERACTIVE)))
    assert ids(by_priority) == [urgent.id]
    assert ids(await walk(store, job_filter=where(("pool", "onprem")))) == [urgent.id]
    no_error = where(("status", JobStatus.FAILED), ("error_code", ""))
    assert ids(await walk(store, job_filter=no_error)) == [failed.id]


async def test_the_first_indexed_term_drives_and_the_others_are_checked(store: Store) -> None:
    await submit_one(store, model="m1", labels={"a": "1"})
    wanted = await submit_one(store, model="m1", labels={"a": "2"})
    await submit_one(store, model="m2", labels={"a": "2"})
    both = where(("labels.a", "2"), ("model", "m1"))
    assert ids(await walk(store, job_filter=both)) == [wanted.id]


async def test_a_call_examines_at_most_ten_jobs_per_listed_one(store: Store) -> None:
    page_size = 2
    wanted = await submit_one(store, labels={"wanted": "yes"})
    for _ in range(60):
        await submit_one(store)
    after: ListCursor | None = None
    calls, listed = 0, []
    while True:
        calls += 1
        page = await store.list_jobs(TENANT, where(("labels.wanted", "yes")), after, page_size)
        listed += page.jobs
        if page.next is None:
            break
        after = page.next
    assert ids(listed) == [wanted.id]
    # each call examined at most EXAMINE_FACTOR x page_size of the 61 jobs
    assert calls >= math.ceil(61 / (EXAMINE_FACTOR * page_size))


async def test_a_short_page_before_the_end_still_has_a_cursor(store: Store) -> None:
    await submit_one(store, labels={"wanted": "yes"})
    for _ in range(40):
        await submit_one(store)
    page = await store.list_jobs(TENANT, where(("labels.wanted", "yes")), None, 1)
    assert page.jobs == []
    assert page.next is not None


# -- stability ----------------------------------------------------------------


async def test_a_walk_lists_each_job_existing_throughout_once_while_jobs_change(
    store: Store,
) -> None:
    existing = [await submit_one(store) for _ in range(12)]
    await submit_group(store, 3, max_parallel=1)
    listed: list[Job] = []
    after: ListCursor | None = None
    while True:
        page = await store.list_jobs(TENANT, JobFilter(), after, 3)
        listed += page.jobs
        # between pages: new jobs, a claim and a completion, a cancel
        await submit_one(store)
        claimed = await store.claim("w1", [MODEL])
        if claimed:
            await complete(store, claimed[0])
        await store.cancel(TENANT, existing[len(listed) % len(existing)].id)
        if page.next is None:
            break
        after = page.next
    listed_ids = ids(listed)
    assert len(listed_ids) == len(set(listed_ids))
    assert {job.id for job in existing} <= set(listed_ids)


async def test_a_status_walk_lists_each_job_matching_throughout_once(store: Store) -> None:
    staying = [await submit_one(store, model="stays") for _ in range(8)]
    moving = [await submit_one(store) for _ in range(8)]
    listed: list[Job] = []
    after: ListCursor | None = None
    queued = where(("status", JobStatus.QUEUED))
    while True:
        page = await store.list_jobs(TENANT, queued, after, 2)
        assert {job.status for job in page.jobs} <= {JobStatus.QUEUED}
        listed += page.jobs
        await submit_one(store)
        claimed = await store.claim("w1", [MODEL])
        if claimed:
            await complete(store, claimed[0])
        if page.next is None:
            break
        after = page.next
    listed_ids = ids(listed)
    assert len(listed_ids) == len(set(listed_ids))
    assert {job.id for job in staying} <= set(listed_ids)
    assert moving  # some of them left QUEUED while the walk ran; either way, once at most


# -- TTL ----------------------------------------------------------------------


async def test_a_job_past_its_result_ttl_is_not_listed(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=timedelta(seconds=0.2))
    live = await submit_one(store)
    gone = await submit_one(store)
    await store.cancel(TENANT, gone.id)

    async def only_the_live_job() -> bool:
        await store.recover()
        for job_filter in (JobFilter(), where(("status", JobStatus.CANCELLED)),
                           where(("model", MODEL))):  # fmt: skip
            assert gone.id not in ids(await walk(store, job_filter=job_filter))
        return True

    await assert_eventually(only_the_live_job)
    assert ids(await walk(store)) == [live.id]


async def test_a_groups_children_leave_the_lists_with_it(make_store: MakeStore) -> None:
    store = await make_store(result_ttl=timedelta(seconds=0.2))
    group = await submit_group(store, 2)
    await store.cancel(TENANT, group.id)

    async def gone() -> bool:
        await store.recover()
        assert await walk(store, job_filter=where(("kind", JobKind.CHILD))) == []
        return await walk(store) == []

    await assert_eventually(gone)
