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

from store.model import PRIORITIES_IN_CLAIM_ORDER, GroupSpec, Priority, SubmitRequest
from store.redis.connection import Connection
from store.redis.partition import Partition
from store.redis.scripts import ArgValue

#: How long one read of the other partitions serves later Submits.
OTHERS_TTL = 1.0

_RANK = {priority: rank for rank, priority in enumerate(PRIORITIES_IN_CLAIM_ORDER)}
JobClass = tuple[str, Priority]


def up_to(priority: Priority) -> tuple[Priority, ...]:
    """The priorities claimed before `priority`, then itself."""
    return PRIORITIES_IN_CLAIM_ORDER[: _RANK[priority] + 1]


def job_class(request: SubmitRequest) -> JobClass | None:
    """The ready queue a single job goes to (a group's children are held first)."""
    if isinstance(request.work, GroupSpec):
        return None
    return request.work.model, request.priority


def job_count(request: SubmitRequest) -> int:
    return len(request.work.children) if isinstance(request.work, GroupSpec) else 1


@dataclass
class View:
    """The other partitions as one read saw them, plus what this store admitted since."""

    at: float
    total: int = 0
    tenants: dict[str, int] = field(default_factory=dict)
    #: (model, priority) -> ready jobs of that class and the classes claimed before it
    ahead: dict[JobClass, int] = field(default_factory=dict)

    def admit(self, request: SubmitRequest) -> None:
        jobs = job_count(request)
        self.total += jobs
        if request.tenant in self.tenants:
            self.tenants[request.tenant] += jobs
        queued = job_class(request)
        if queued is not None:
            for model, priority in self.ahead:
                if model == queued[0] and _RANK[queued[1]] <= _RANK[priority]:
                    self.ahead[(model, priority)] += 1


class OtherPartitions:
    """Each partition's cached view of the others (see the module docstring)."""

    def __init__(self, connection: Connection, parts: Sequence[Partition]) -> None:
        self._connection = connection
        self._parts = parts
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
            for model, priority in classes:
                commands += [["ZCARD", part.keys.queue(model, p)] for p in up_to(priority)]
        replies = iter(await self._connection.read_pipelined("submit", commands))
        view.tenants.update(dict.fromkeys(tenants, 0))
        view.ahead.update(dict.fromkeys(classes, 0))
        for _ in others:
            if fresh:
                view.total += int(next(replies) or 0)
            for tenant in tenants:
                view.tenants[tenant] += int(next(replies) or 0)
            for job_class_ in classes:
                view.ahead[job_class_] += sum(int(next(replies)) for _ in up_to(job_class_[1]))

    def admitted(self, index: int, requests: Sequence[SubmitRequest]) -> None:
        """Count what this store just admitted to partition `index` in the others' views,
        so one gateway's own submits never pass a cap or miscount a position."""
        for other, view in self._views.items():
            if other != index:
                for request in requests:
                    view.admit(request)
