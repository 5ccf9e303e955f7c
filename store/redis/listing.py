"""ListJobs on Redis: one partition's share of a page, and the drain of expired entries.

The index keys and members are includes/index.lua's (docs/list-jobs.md):
`index:status` holds one member per job, "<tenant>|<S><K><create ms><id>",
so a (tenant, status, kind) run is one prefix; `index:model:<tenant>:<model>`
holds "<create ms><id>". A partition's share of a page is two round trips:
list_jobs.lua reads the runs merged (read only, every key in KEYS), then
one pipeline reads the candidates' records (HGETALL), and every term is
checked on them (store/listing.py `matches`). An admin's walk over every
tenant first asks list_tenants.lua for the partition's tenants (a third
round trip). A group's children are read from its children list, whose
ids ascend with the index (store/redis/partition.py `_indexed`), so a page
of them is one LRANGE slice.

A job past its result_ttl leaves the runs when recovery drains
`index:expiring` (`drain`, unindex_expired.lua): the entries are in TTL
order, so a drain reads only what fell due. Until then a read meets the
member of a record that is gone and skips it (reads never write).
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Sequence
from typing import Any

from store import listing
from store.fields import from_record
from store.keys import Keys
from store.listing import IndexKey, PartPage, Walk
from store.model import Job, JobFilter, JobKind, JobPage, JobStatus, ListCursor
from store.redis.codec import record
from store.redis.connection import Connection, text, translated
from store.redis.pools import StoreClient
from store.redis.scripts import ArgValue

#: includes/index.lua INDEX_STATUS and INDEX_KIND.
STATUS_CODES = {
    JobStatus.HELD: "h",
    JobStatus.QUEUED: "q",
    JobStatus.PROCESSING: "p",
    JobStatus.COMPLETED: "c",
    JobStatus.FAILED: "f",
    JobStatus.CANCELLED: "x",
    JobStatus.PARTIAL: "r",
}
KIND_CODES = {JobKind.SINGLE: "s", JobKind.GROUP: "g", JobKind.CHILD: "c"}
#: Entries of index:expiring one drain call handles at most.
DRAIN_BATCH = 100
_MS_DIGITS = 13


def status_prefix(tenant: str, status: JobStatus, kind: JobKind) -> str:
    return f"{tenant}|{STATUS_CODES[status]}{KIND_CODES[kind]}"


def _ms(value: int) -> str:
    return f"{value:0{_MS_DIGITS}d}"


def upper_bound(key: IndexKey | None) -> str:
    """The exclusive bound after a run's prefix for "below `key`" (µs, id)."""
    if key is None:
        return ""
    at, job_id = key
    if at % 1000 == 0:
        return _ms(at // 1000) + job_id
    return _ms(at // 1000 + 1)  # every job of that millisecond is below it


def lower_bound(lowest: int | None) -> str:
    """The inclusive bound after a run's prefix for "created at `lowest` µs or later"."""
    return "" if lowest is None else _ms(-(-lowest // 1000))


def key_of_member(suffix: str) -> IndexKey:
    """A member's key (after its prefix): "<create ms><id>"."""
    return int(suffix[:_MS_DIGITS]) * 1000, suffix[_MS_DIGITS:]


class PartitionLister:
    """One partition's share of ListJobs pages (see the module docstring)."""

    def __init__(self, connection: Connection, keys: Keys) -> None:
        self.connection = connection
        self.keys = keys

    async def tenants(self) -> list[str]:
        reply = await self.connection.run("list_jobs", "list_tenants", [self.keys.index_status], [])
        return [text(tenant) for tenant in reply]

    async def page(
        self, walk: Walk, after: ListCursor | None, page_size: int, limit: int
    ) -> PartPage:
        upper = walk.upper(after)
        if walk.driver == "parent":
            candidates, exhausted = await self._children(walk, upper, limit)
        else:
            tenants = [walk.tenant] if walk.tenant is not None else await self.tenants()
            candidates, exhausted = await self._runs(walk, tenants, upper, limit)
        jobs = await self.records([job_id for _, job_id in candidates])
        return listing.part_page(candidates, exhausted, jobs, walk, page_size)

    async def _runs(
        self, walk: Walk, tenants: Sequence[str], upper: IndexKey | None, limit: int
    ) -> tuple[list[IndexKey], bool]:
        keys: list[str] = []
        runs: list[ArgValue] = []
        if walk.driver == "model":
            for tenant in tenants:
                keys.append(self.keys.index_model(tenant, walk.model))
                runs += [len(keys), ""]
        else:
            keys.append(self.keys.index_status)
            for tenant in tenants:
                for status, kind in walk.status_runs():
                    runs += [1, status_prefix(tenant, status, kind)]
        if not runs:
            return [], True
        args: list[ArgValue] = [limit, upper_bound(upper), lower_bound(walk.lowest), *runs]
        found, exhausted = await self.connection.run("list_jobs", "list_jobs", keys, args)
        return [key_of_member(text(member)) for member in found], bool(exhausted)

    async def _children(
        self, walk: Walk, upper: IndexKey | None, limit: int
    ) -> tuple[list[IndexKey], bool]:
        """A page of the group's children, newest (highest index) first.

        They share the group's create time and their ids ascend with their
        index, so the page below a cursor ends just before the cursor's
        child: found from its record, or else (a forged cursor) by a search
        of the whole list (at most max_group_children ids).
        """
        parent_id = walk.parent_id
        children = self.keys.children(parent_id)
        commands: list[list[ArgValue]] = [
            ["HMGET", self.keys.job(parent_id), "tenant", "create_time", "kind"],
            ["LLEN", children],
        ]
        if upper is not None and upper[1]:
            commands.append(["HMGET", self.keys.job(upper[1]), "parent_id", "child_index"])
        replies = await self.connection.read_pipelined("list_jobs", commands)
        tenant, created, kind = replies[0]
        if created is None or kind != b"group":
            return [], True
        if walk.tenant is not None and text(tenant) != walk.tenant:
            return [], True
        at = int(created) * 1000
        if walk.lowest is not None and at < walk.lowest:
            return [], True
        end = int(replies[1])
        if upper is not None and upper[0] <= at:
            end = 0 if upper[0] < at else await self._below(walk, replies, upper[1], end)
        start = max(0, end - limit)
        if end <= start:
            return [], True
        command: list[ArgValue] = ["LRANGE", children, start, end - 1]
        ids = (await self.connection.read_pipelined("list_jobs", [command]))[0]
        keys = [(at, text(child)) for child in reversed(ids)]
        return keys, start == 0

    async def _below(self, walk: Walk, replies: list[Any], job_id: str, size: int) -> int:
        """How many children (from index 0) have an id below `job_id`."""
        if len(replies) > 2 and replies[2][0] is not None:
            parent, index = replies[2]
            if text(parent) == walk.parent_id:
                return int(index)
        children = self.keys.children(walk.parent_id)
        every = await self.connection.read_pipelined("list_jobs", [["LRANGE", children, 0, -1]])
        return bisect.bisect_left([text(child) for child in every[0]], job_id, hi=size)

    async def records(self, job_ids: Sequence[str]) -> dict[str, Job]:
        """The listed form of each job whose record is still there."""
        if not job_ids:
            return {}
        commands: list[list[ArgValue]] = [["HGETALL", self.keys.job(i)] for i in job_ids]
        replies = await self.connection.read_pipelined("list_jobs", commands)
        jobs: dict[str, Job] = {}
        for job_id, reply in zip(job_ids, replies, strict=True):
            fields = _fields(reply)
            if fields:
                jobs[job_id] = from_record(fields)
        return jobs

    async def drain(self, client: StoreClient) -> int:
        """Take the jobs whose records expired out of the runs; how many entries it handled.

        The list is in the order its entries were pushed, so its head is due
        first: while the head is not due yet by this host's clock, nothing is
        read further and no script runs (recovery calls this a few times a
        second, and the list holds every job ended within result_ttl). The
        script decides by the store's clock; a host clock behind it only
        delays the drain by the difference.
        """
        handled = 0
        while True:
            self.connection.check_open()
            with translated("recover"):  # on recovery's own pool, like its scripts
                first: Any = await client.lindex(self.keys.index_expiring, 0)
            if first is None or _due_ms(text(first)) > time.time() * 1000:
                return handled
            with translated("recover"):
                head: Any = await client.lrange(self.keys.index_expiring, 0, DRAIN_BATCH - 1)
            entries = [text(entry) for entry in head]
            if not entries:
                return handled
            keys = [self.keys.index_status, self.keys.index_expiring]
            for entry in entries:
                _, member, model = [*entry.split(" "), "", ""][:3]
                tenant, _, rest = member.partition("|")
                job_id = rest[2 + _MS_DIGITS :]
                keys += [self.keys.job(job_id), self.keys.index_model(tenant, model)]
            done = int(
                await self.connection.run("recover", "unindex_expired", keys, entries, client)
            )
            handled += done
            if done < len(entries):
                return handled


def _due_ms(entry: str) -> int:
    """An index:expiring entry's due time ("<due ms> <member> <model>"); 0 if unreadable
    (the script then decides what to do with it)."""
    due = entry.split(" ", 1)[0]
    return int(due) if due.isdigit() else 0


def _fields(reply: Any) -> dict[str, bytes]:
    """An HGETALL reply (a dict, or flat in RESP2 without a callback) by field name."""
    if isinstance(reply, dict):
        return {text(name): value for name, value in reply.items()}
    return record(reply)


async def list_pages(
    listers: Sequence[PartitionLister],
    tenant: str | None,
    query: JobFilter,
    after: ListCursor | None,
    page_size: int,
    parent_part: int | None = None,
) -> JobPage:
    """One ListJobs page over every partition: each partition's share read at once,
    then merged (store/listing.py `merge`). A walk of a group's children reads only
    the group's partition (`parent_part`): its children are all there.

    Cost per page: O(partitions x (runs + page_size) x log N) in Redis, in two
    round trips of wall time (three for an admin's walk over every tenant).
    """
    walk = listing.plan(tenant, query)
    if walk is None:
        return JobPage([], None)
    if walk.driver == "parent" and parent_part is not None:
        listers = [listers[parent_part]]
    limit = listing.examine_limit(walk, page_size, len(listers))
    reads = (lister.page(walk, after, page_size, limit) for lister in listers)
    pages = await asyncio.gather(*reads)
    return listing.merge(pages, page_size)
