"""ListJobs in the store, as both engines walk it: which index drives, and how pages merge.

Order: newest first, by the key (create_time in µs, job id), descending.
Every index is a set of *runs*, each sorted by that key:

* a status run per (tenant, status, kind): every job is in exactly one,
  moved by the transition that changes its status (the same atomic step);
* a model run per (tenant, model): filled at submit, emptied at expiry;
* a group's children (its children list: they share the parent's
  create_time, and their ids ascend with their index, so the list is in
  key order).

`plan` picks the runs a filter needs: the first term on status or kind
(both fold into the status runs), model or parent_id drives; without one,
every status run of the tenant. An admin's walk over every tenant takes
the runs of each tenant the partition holds. create_time terms narrow the
key range. Each engine reads its runs merged, newest first, from a cursor
(`read` below), and every job it lists is checked against the whole filter
on the record read (`matches`), so a job is listed only if it matched when
the page was read.

Stability (DESIGN "ListJobs"): a job's key never changes, a page lists
the keys of one interval below the cursor, and the intervals of a walk's
pages are disjoint and cover everything below its start. A job that exists
and matches for the whole walk is in one of the driving runs whenever a
page is read, so the page whose interval holds its key lists it, and no
other page can. On several partitions each page is the merge of one read
per partition, cut at the highest key down to which every partition was
read (`merge`), so the same holds. Walks whose filter has terms no run
covers examine at most `EXAMINE_FACTOR` x page_size jobs per call (split
over the partitions) and may answer a short page with a cursor.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from store.model import (
    FilterTerm,
    Job,
    JobFilter,
    JobKind,
    JobPage,
    JobStatus,
    ListCursor,
)

#: (create_time in µs since the epoch, job id): the walk's order, newest first.
IndexKey = tuple[int, str]

#: A call with terms no run covers examines at most this many jobs per listed one.
EXAMINE_FACTOR = 10

#: The (status, kind) pairs a job can be in: the status runs of one tenant.
STATUS_RUNS: tuple[tuple[JobStatus, JobKind], ...] = tuple(
    (status, kind)
    for kind in JobKind
    for status in JobStatus
    if not (kind is JobKind.SINGLE and status in (JobStatus.HELD, JobStatus.PARTIAL))
    and not (kind is JobKind.GROUP and status is JobStatus.HELD)
    and not (kind is JobKind.CHILD and status is JobStatus.PARTIAL)
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INDEXED = ("status", "kind", "model", "parent_id")


def micros(moment: datetime) -> int:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(microseconds=1)


def timestamp_micros(timestamp: float) -> int:
    """`micros(datetime.fromtimestamp(timestamp, UTC))` without the datetime: the same
    split and round-half-even of the fraction CPython's fromtimestamp makes, at a
    quarter of the cost (a restart keys a million jobs)."""
    fraction, whole = math.modf(timestamp)
    return int(whole) * 1_000_000 + round(fraction * 1e6)


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def key_of(job: Job) -> IndexKey:
    return micros(job.create_time), job.id


def cursor_key(cursor: ListCursor) -> IndexKey:
    return micros(cursor.create_time), cursor.job_id


def cursor_of(key: IndexKey) -> ListCursor:
    return ListCursor(create_time=from_micros(key[0]), job_id=key[1])


@dataclass(frozen=True)
class Walk:
    """What one ListJobs walk reads, decided once per page from the scope and filter."""

    #: One tenant's jobs, or None: every tenant's (an admin without a tenant term).
    tenant: str | None
    job_filter: JobFilter
    #: The driving index: "status" (status runs), "model" or "parent".
    driver: str
    statuses: tuple[JobStatus, ...] = ()
    kinds: tuple[JobKind, ...] = ()
    model: str = ""
    parent_id: str = ""
    #: create_time bounds in µs, inclusive (None: open).
    lowest: int | None = None
    highest: int | None = None
    #: Terms the driving runs and bounds do not settle: checked job by job,
    #: so a call examines up to EXAMINE_FACTOR x page_size of them.
    residual: bool = False

    def status_runs(self) -> list[tuple[JobStatus, JobKind]]:
        return [(s, k) for s, k in STATUS_RUNS if s in self.statuses and k in self.kinds]

    def upper(self, after: ListCursor | None) -> IndexKey | None:
        """The exclusive key the read starts below (None: the newest job)."""
        bounds = []
        if after is not None:
            bounds.append(cursor_key(after))
        if self.highest is not None:
            bounds.append((self.highest + 1, ""))
        return min(bounds) if bounds else None


def plan(scope: str | None, job_filter: JobFilter) -> Walk | None:
    """The walk for `job_filter` within `scope` (a tenant, or None: every tenant);
    None when the filter can match nothing (a tenant term outside the scope)."""
    terms = job_filter.terms
    tenant = scope
    for term in terms:
        if term.field == "tenant":
            if scope is not None and term.value != scope:
                return None
            tenant = str(term.value)
    lowest, highest = _time_bounds(terms)
    if lowest is not None and highest is not None and lowest > highest:
        return None
    walk = Walk(
        tenant,
        job_filter,
        "status",
        statuses=tuple(JobStatus),
        kinds=tuple(JobKind),
        lowest=lowest,
        highest=highest,
    )
    driver = next((t for t in terms if t.field in _INDEXED), None)
    if driver is None:
        covered = {"tenant", "create_time"}
    elif driver.field in ("status", "kind"):
        status = _value(terms, "status")
        kind = _value(terms, "kind")
        walk = dataclasses.replace(
            walk,
            statuses=(JobStatus(str(status)),) if status is not None else walk.statuses,
            kinds=(JobKind(str(kind)),) if kind is not None else walk.kinds,
        )
        covered = {"tenant", "create_time", "status", "kind"}
    elif driver.field == "model":
        walk = dataclasses.replace(walk, driver="model", model=str(driver.value))
        covered = {"tenant", "create_time", "model"}
    else:
        walk = dataclasses.replace(walk, driver="parent", parent_id=str(driver.value))
        covered = {"tenant", "create_time", "parent_id"}
    residual = any(term.field not in covered for term in terms)
    return dataclasses.replace(walk, residual=residual)


def _value(terms: Sequence[FilterTerm], name: str) -> object | None:
    return next((term.value for term in terms if term.field == name), None)


def _time_bounds(terms: Sequence[FilterTerm]) -> tuple[int | None, int | None]:
    lowest: int | None = None
    highest: int | None = None
    for term in terms:
        if term.field != "create_time":
            continue
        assert isinstance(term.value, datetime)
        at = micros(term.value)
        if term.op == ">":
            lowest = at + 1
        elif term.op == ">=":
            lowest = at
        elif term.op == "<":
            highest = at - 1
        elif term.op == "<=":
            highest = at
    return lowest, highest


def matches(job: Job, walk: Walk) -> bool:
    """Whether `job` is in the walk's scope and satisfies every term of its filter."""
    if walk.tenant is not None and job.tenant != walk.tenant:
        return False
    return all(_holds(job, term) for term in walk.job_filter.terms)


def _holds(job: Job, term: FilterTerm) -> bool:
    name, value = term.field, term.value
    if name.startswith("labels."):
        return job.labels.get(name[len("labels.") :]) == value
    if name == "create_time":
        assert isinstance(value, datetime)
        at, bound = micros(job.create_time), micros(value)
        return {
            "<": at < bound,
            "<=": at <= bound,
            ">": at > bound,
            ">=": at >= bound,
        }[term.op]
    return bool(getattr(job, name) == value)


def examine_limit(walk: Walk, page_size: int, partitions: int) -> int:
    """How many index entries one partition's read may return for one page.

    One more than the page (to know whether more follow) when the runs
    settle every term; else the call's EXAMINE_FACTOR x page_size shared
    by the partitions, never fewer than that one-more.
    """
    if not walk.residual:
        return page_size + 1
    return max(page_size + 1, EXAMINE_FACTOR * page_size // partitions)


@dataclass(frozen=True)
class PartPage:
    """One partition's (or LocalEngine's) share of a page."""

    jobs: list[Job]
    #: True when this partition has entries below `frontier` it did not read.
    more: bool
    #: The lowest key this read settled: everything of this partition from
    #: the cursor down to it (inclusive) was read.
    frontier: IndexKey | None


def part_page(
    candidates: Sequence[IndexKey],
    exhausted: bool,
    jobs: dict[str, Job],
    walk: Walk,
    page_size: int,
) -> PartPage:
    """The page share of one read: `candidates` in order (the index read, newest
    first, `exhausted` when nothing follows them), with `jobs` their records as
    read afterwards (an id missing: its record expired)."""
    listed: list[Job] = []
    frontier: IndexKey | None = None
    examined = 0
    for key in candidates:
        examined += 1
        frontier = key
        job = jobs.get(key[1])
        if job is not None and key_of(job) == key and matches(job, walk):
            listed.append(job)
            if len(listed) == page_size:
                break
    more = examined < len(candidates) or not exhausted
    return PartPage(listed, more, frontier)


def merge(pages: Sequence[PartPage], page_size: int) -> JobPage:
    """One page from every partition's share (see the module docstring).

    A partition with more below its frontier is only known down to there,
    so the page stops at the highest such frontier (`cut`): listing a job
    below it could skip that partition's unread jobs.
    """
    cut = max((page.frontier for page in pages if page.more and page.frontier), default=None)
    known = [job for page in pages for job in page.jobs if cut is None or key_of(job) >= cut]
    known.sort(key=key_of, reverse=True)
    listed = known[:page_size]
    left = len(known) > page_size or any(page.more for page in pages)
    if not left:
        return JobPage(listed, None)
    if len(listed) == page_size:
        return JobPage(listed, cursor_of(key_of(listed[-1])))
    assert cut is not None  # something is left, and every read job is listed
    return JobPage(listed, cursor_of(cut))


def bare(job: Job) -> Job:
    """A job as ListJobs lists it: no result, children or queue_position."""
    return dataclasses.replace(job, result=b"", children=(), queue_position=None)
