"""What the other partitions hold, as a Submit to one of them needs it, read once a second.

A Submit runs in one partition's script, which checks that partition's
counters atomically. The deployment-wide caps and the new job's queue
position also need the other partitions' live counts and ready queues:
reading them on every Submit would cost one read of every partition each
time, a cost that grows with the partitions. So each partition's view of
the others is read at most once per OTHERS_TTL (one pipeline), and what
this store admits meanwhile is added to it. Concurrent submits through
other gateways may thus pass a cap together by what they admit within
OTHERS_TTL, and a Submit's answer counts the other partitions' queues as
they were up to OTHERS_TTL ago (Get and watch count them now).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from store.model import PRIORITIES_IN_CLAIM_ORDER, GroupSpec, Job, Priority, SubmitRequest
from store.redis.connection import Connection
from store.redis.hints import Hints
from store.redis.partition import Partition
from store.redis.scripts import ArgValue

#: How long one read of the other partitions serves later Submits.
OTHERS_TTL = 1.0

_RANK = {priority: rank for rank, priority in enumerate(PRIORITIES_IN_CLAIM_ORDER)}
#: (model, priority, pool) a single job queues as.
JobClass = tuple[str, Priority, str]


def up_to(priority: Priority) -> tuple[Priority, ...]:
    """The priorities claimed before `priority`, then itself."""
    return PRIORITIES_IN_CLAIM_ORDER[: _RANK[priority] + 1]


def job_class(request: SubmitRequest) -> JobClass | None:
    """What a single job queues as (a group's children are held first)."""
    if isinstance(request.work, GroupSpec):
        return None
    return request.work.model, request.priority, request.work.pool


def _pools(pool: str) -> tuple[str, ...]:
    """The queues a job of `pool` is ordered against: its pool's and the any-pool one."""
    return (pool, "") if pool else ("",)


def job_count(request: SubmitRequest) -> int:
    return len(request.work.children) if isinstance(request.work, GroupSpec) else 1


@dataclass
class View:
    """The other partitions as one read saw them, plus what this store admitted since."""

    at: float
    total: int = 0
    tenants: dict[str, int] = field(default_factory=dict)
    #: (model, priority, pool) -> ready jobs the workers of that pool take first
    ahead: dict[JobClass, int] = field(default_factory=dict)

    def admit(self, request: SubmitRequest) -> None:
        jobs = job_count(request)
        self.total += jobs
        if request.tenant in self.tenants:
            self.tenants[request.tenant] += jobs
        queued = job_class(request)
        if queued is not None:
            model, rank, pool = queued[0], _RANK[queued[1]], queued[2]
            for other in self.ahead:
                if other[0] == model and rank <= _RANK[other[1]] and pool in _pools(other[2]):
                    self.ahead[other] += 1


class OtherPartitions:
    """Each partition's cached view of the others (see the module docstring)."""

    def __init__(self, connection: Connection, parts: Sequence[Partition], hints: Hints) -> None:
        self._connection = connection
        self._parts = parts
        # the other partitions' fair-share floors raise this store's (Hints.floor)
        self._hints = hints
        self._views: dict[int, View] = {}

    async def view(self, index: int, requests: Sequence[SubmitRequest]) -> View:
        """The others of partition `index`, holding what `requests` need."""
        tenants = {request.tenant for request in requests}
        classes = {c for c in map(job_class, requests) if c is not None}
        now = time.monotonic()
        view = self._views.get(index)
        if view is None or now - view.at >= OTHERS_TTL:
            view = self._views[index] = View(now)
            fresh = True
        else:
            fresh = False
        tenants -= view.tenants.keys()
        classes -= view.ahead.keys()
        if fresh or tenants or classes:
            await self._read(index, view, fresh, sorted(tenants), sorted(classes))
        return view

    async def _read(
        self,
        index: int,
        view: View,
        fresh: bool,
        tenants: list[str],
        classes: list[JobClass],
    ) -> None:
        others = [part for other, part in enumerate(self._parts) if other != index]
        commands: list[list[ArgValue]] = []
        for part in others:
            if fresh:
                commands.append(["GET", part.keys.live_total])
            commands += [["HGET", part.keys.live, tenant] for tenant in tenants]
            for model, priority, pool in classes:
                commands += [
                    ["ZCARD", part.keys.queue(model, p, queue_pool)]
                    for p in up_to(priority)
                    for queue_pool in _pools(pool)
                ]
                commands.append(["HGET", part.keys.fair(model), f"floor:{int(priority)}"])
        replies = iter(await self._connection.read_pipelined("submit", commands))
        view.tenants.update(dict.fromkeys(tenants, 0))
        view.ahead.update(dict.fromkeys(classes, 0))
        for _ in others:
            if fresh:
                view.total += int(next(replies) or 0)
            for tenant in tenants:
                view.tenants[tenant] += int(next(replies) or 0)
            for model, priority, pool in classes:
                counts = len(up_to(priority)) * len(_pools(pool))
                view.ahead[(model, priority, pool)] += sum(
                    int(next(replies)) for _ in range(counts)
                )
                self._hints.raise_floor(model, priority, float(next(replies) or 0))

    def admitted(self, index: int, requests: Sequence[SubmitRequest]) -> None:
        """Count what this store just admitted to partition `index` in the others' views,
        so one gateway's own submits never pass a cap or miscount a position."""
        for other, view in self._views.items():
            if other != index:
                for request in requests:
                    view.admit(request)


async def position_elsewhere(
    connection: Connection, parts: Sequence[Partition], index: int, job: Job, score: str
) -> int:
    """Jobs the other partitions queue ahead of `job` (its partition counted it already).

    Ahead, in claim order: every ready job of a higher priority, and of its
    own priority those of a lower queue score than `score` (the job's),
    or an equal one in a lower partition. One position_elsewhere.lua (a
    ZCOUNT and ZCARDs) per other partition, in one pipeline;
    O(partitions x log N).
    """
    pools = (job.pool, "") if job.pool else ("",)  # its workers take both, in one order
    calls: list[tuple[list[str], list[ArgValue]]] = [
        (
            [part.keys.queue(job.model, job.priority, pool) for pool in pools]
            + [
                part.keys.queue(job.model, p, pool)
                for p in up_to(job.priority)[:-1]
                for pool in pools
            ],
            [_count_bound(score, other, index), len(pools)],
        )
        for other, part in enumerate(parts)
        if other != index
    ]
    replies = await connection.run_pipelined("get", "position_elsewhere", calls)
    return sum(int(reply) for reply in replies)


def _count_bound(score: str, other: int, index: int) -> str:
    """ZCOUNT's max bound in partition `other` for a job of partition `index`:
    on an equal score the lower partition index is claimed first."""
    return score if other < index else "(" + score
