"""ListJobs in memory: one read of LocalEngine's sorted runs (store/memory/index.py).

The walk is store/listing.py's; a group's children are sorted by key from
the group's record (at most max_group_children of them, all sharing the
group's create_time).
"""

from __future__ import annotations

from store import listing
from store.listing import IndexKey, Walk
from store.memory.index import record_key
from store.memory.state import State
from store.model import Job, JobFilter, JobPage, ListCursor


def list_jobs(
    state: State,
    tenant: str | None,
    job_filter: JobFilter,
    after: ListCursor | None,
    page_size: int,
) -> JobPage:
    walk = listing.plan(tenant, job_filter)
    if walk is None:
        return JobPage([], None)
    limit = listing.examine_limit(walk, page_size, 1)
    upper = walk.upper(after)
    if walk.driver == "parent":
        keys, exhausted = _children(state, walk, upper, limit)
    else:
        keys, exhausted = state.index.read(state.index.runs(walk), upper, walk.lowest, limit)
    now = state.clock()
    jobs: dict[str, Job] = {}
    for _, job_id in keys:
        record = state.fresh(job_id, now)
        if record is not None:
            jobs[job_id] = listing.bare(state.snapshot(record))
    return listing.merge([listing.part_page(keys, exhausted, jobs, walk, page_size)], page_size)


def _children(
    state: State, walk: Walk, upper: IndexKey | None, limit: int
) -> tuple[list[IndexKey], bool]:
    parent = state.fresh(walk.parent_id, state.clock())
    if parent is None or (walk.tenant is not None and parent.tenant != walk.tenant):
        return [], True
    keys = sorted(
        (record_key(state.jobs[child]) for child in parent.children if child in state.jobs),
        reverse=True,
    )
    keys = [
        key
        for key in keys
        if (upper is None or key < upper) and (walk.lowest is None or key[0] >= walk.lowest)
    ]
    return keys[:limit], len(keys) <= limit
