"""RedisEngine: one deployment's state over 1..N partitions (--redis-partitions).

Each partition is one hash tag ("<name>" alone, or "<name>/<i>" of several:
store/keys.py), so one slot: on Redis Cluster the partitions spread over the
masters. All of them share one `Connection` (pools, scripts, one notifier
subscribed to every partition's channels: on Cluster one sharded
subscription per master). One partition is the simplest case of the same
path; docs/redis-layout.md, "Partitions", gives the rules. In short:

* A job id names its partition: crc32(id) % N (store/redis/ids.py); a
  group's children are drawn in the parent's partition.
* An unkeyed Submit goes to the next partition in turn; a keyed one (and a
  BatchSubmit holding a keyed item) to its tenant's partition, where its
  idempotency key lives: each script stays on one slot and a key always
  finds its original.
* Every call on a job goes straight to the id's partition.
* A claim on one partition runs its script there. On several it reads the
  heads of its models' ready queues, with their scores, in every partition
  (one pipeline), takes the best priority's jobs of the lowest score (each
  partition's clock in µs; the lower partition index on a tie), one claim
  script per partition chosen.
* The deployment-wide caps and a Submit's queue position count the other
  partitions from a read cached for at most a second (store/redis/others.py),
  so N partitions do not cost a Submit N reads; Get counts a position across
  partitions now (O(partitions x log N), one pipeline).
* The audit stream is every partition's stream merged, with cursors that
  hold one position per partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from store import model
from store.errors import (
    FailureHook,
    InvalidRequest,
    StoreError,
    StoreMisconfigured,
    ignore_failure,
)
from store.keys import Keys, partition_tags
from store.policy import class_parts, position_settle
from store.redis import recovery
from store.redis.connection import Connection, text, translated
from store.redis.events import MergedEvents
from store.redis.fleet import RedisFleet
from store.redis.hints import Hints
from store.redis.ids import PartitionIds, new_ulid, partition_of
from store.redis.listing import list_pages
from store.redis.notify import Listener
from store.redis.occupancy import Occupancy
from store.redis.others import OtherPartitions, View, position_elsewhere
from store.redis.partition import Partition
from store.redis.scripts import ArgValue

T = TypeVar("T")

# Claim and watch waits re-check the store this often even without a wake-up.
SAFETY_RECHECK = 5.0
# A claim whose plan met only jobs other workers took first plans again, at
# most this many times before it waits for a notification.
PLAN_ROUNDS = 8

_RANK = {priority: rank for rank, priority in enumerate(model.PRIORITIES_IN_CLAIM_ORDER)}


def recheck() -> float:
    """The safety re-check delay, jittered so waits begun together do not re-read together."""
    return SAFETY_RECHECK * random.uniform(0.8, 1.2)


# Claim order across partitions: (priority rank, queue score, partition index).
Order = tuple[int, float, int]


@dataclasses.dataclass
class _Plan:
    """What one read of the queues' heads chose, and the order of every head it saw."""

    counts: list[tuple[int, int]]  # (partition, jobs to claim there), best first
    order: dict[str, Order]  # job id -> its place in claim order

    def sort(self, claimed: Iterable[model.ClaimedJob], partitions: int) -> list[model.ClaimedJob]:
        """Leases in claim order; a job the plan did not see (others took the
        ones it saw first) sorts after its priority's seen ones."""

        def place(lease: model.ClaimedJob) -> tuple[Order, str]:
            job = lease.job
            unseen = (_RANK[job.priority], float("inf"), partition_of(job.id, partitions))
            return self.order.get(job.id, unseen), job.id

        return sorted(claimed, key=place)


def _scored(reply: Sequence[Any]) -> list[tuple[bytes, float]]:
    """A ZRANGE ... WITHSCORES reply as (member, score) pairs, flat (RESP2) or paired (RESP3)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [(bytes(member), float(score)) for member, score in reply]
    return [(bytes(reply[i]), float(reply[i + 1])) for i in range(0, len(reply), 2)]


class RedisEngine:
    """The Redis transitions of a deployment over `partitions` hash tags (1..MAX_PARTITIONS)."""

    def __init__(
        self,
        url: str,
        settings: model.StoreSettings,
        *,
        partition: str,
        partitions: int,
        hear_ready: bool,
        hear_changes: bool,
    ) -> None:
        """RedisStore's arguments; their defaults are spelled once, in RedisStore."""
        tags = partition_tags(partition, partitions)  # ValueError outside 1..MAX_PARTITIONS
        self.settings = settings
        self.on_failure: FailureHook = ignore_failure
        self.connection = Connection(url, hear_ready, hear_changes)
        self._hints = Hints()
        self.connection.notifier.on_ready = self._heard_ready
        self.ids = PartitionIds(partitions)
        self.parts = [
            Partition(
                self.connection,
                Keys(tag),
                # each partition's stream keeps the cap: under fair share a
                # tenant's events all land in its partition, so a share of
                # the cap would keep a busy tenant's trail N times shorter
                settings,
                self._hints,
                new_ulid if partitions == 1 else _id_source(self.ids, index),
                self._report,
            )
            for index, tag in enumerate(tags)
        ]
        for part in self.parts:
            self.connection.hear(part.keys)
        self._occupancy = Occupancy({part.keys.notify: i for i, part in enumerate(self.parts)})
        # unkeyed submits go round the partitions, from a random start so
        # that gateways started together do not fill partition 0 first
        self._turn = itertools.count(random.randrange(partitions))
        self._others = OtherPartitions(self.connection, self.parts, self._hints)
        self.fleet = RedisFleet(self.connection, self.parts, settings)
        self._pending: set[asyncio.Future[None]] = set()  # releases of abandoned claims
        self._events = MergedEvents(self.connection, self.parts, self.listen, recheck)
        self.waiter_reads = self.connection.waiter_reads

    def _report(self, operation: str) -> None:
        self.on_failure(operation)

    def _heard_ready(self, channel: str, job_class: str, job_id: str) -> None:
        self._hints.heard_ready(channel, job_class, job_id)
        self._occupancy.heard(channel, job_class)

    @property
    def closed(self) -> bool:
        return self.connection.closed

    @property
    def owner(self) -> Partition:
        """Partition 0: its leader key is the deployment's, its master answers ping."""
        return self.parts[0]

    def part_of(self, job_id: str) -> Partition:
        """The partition holding `job_id`."""
        return self.parts[partition_of(job_id, len(self.parts))]

    # Lifecycle -----------------------------------------------------------------
    async def open(self) -> None:
        await self.connection.open()
        try:
            await self._check_fair_share()
        except StoreMisconfigured:
            await self.close()  # a refused start leaves nothing open
            raise

    async def _check_fair_share(self) -> None:
        """--fair-share is fixed for a deployment's life: the first server to start
        records it (partition 0's settings hash), the others must agree."""
        mode = "tenant" if self.settings.fair_share else "off"
        key = self.owner.keys.settings
        self.connection.check_open()
        with translated("open"):
            await self.connection.control.hsetnx(key, "fair_share", mode)
            recorded = await self.connection.control.hget(key, "fair_share")
        if text(recorded) != mode:
            raise StoreMisconfigured(
                f"this deployment runs with --fair-share {text(recorded)}; "
                f"a server started with --fair-share {mode} cannot join it"
            )

    async def close(self) -> None:
        await self.connection.close()
        # releases of abandoned claims still need the connections
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=2.0)
        await asyncio.gather(*(part.drain() for part in self.parts))
        await self.connection.close_clients()

    async def ping(self) -> None:
        await self.connection.ping(self.owner.keys)

    async def settled(self, soon: bool = False) -> None:
        """Every script's effect is in Redis when it returns: nothing to wait for."""

    # Waiting ---------------------------------------------------------------------
    def listen(
        self, topics: Iterable[str], wake_one: bool = False
    ) -> contextlib.AbstractContextManager[Listener]:
        """A listener on the notifier (every partition's channels).

        `wake_one` for a claim: a ready message wakes one claim listener
        (store/redis/notify.py). Raises UnheardTopic for a topic no
        subscribed channel carries."""
        return self.connection.notifier.listen(topics, wake_one)

    def recheck(self) -> float:
        return recheck()

    def settle_time(self, model: str) -> float:
        return position_settle(self.connection.notifier.listeners(f"q {model}"))

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` on this store (tests, debugging)."""
        return self.connection.notifier.waiters(f"r {model}")

    # Submit --------------------------------------------------------------------
    def _next_turn(self) -> int:
        return next(self._turn) % len(self.parts)

    def _tenant_part(self, tenant: str) -> int:
        return partition_of(tenant, len(self.parts))

    async def submit(self, request: model.SubmitRequest) -> model.SubmitResult:
        # a keyed submit goes where its key lives; under fair share every
        # submit of a tenant does, so its passes are one sequence
        by_tenant = request.idempotency_key or self.settings.fair_share
        index = self._tenant_part(request.tenant) if by_tenant else self._next_turn()
        return (await self._submit(index, [request]))[0]

    async def submit_batch(
        self, requests: Sequence[model.SubmitRequest]
    ) -> list[model.SubmitResult]:
        keyed = [
            request.tenant
            for request in requests
            if request.idempotency_key or self.settings.fair_share
        ]
        if not keyed:
            return await self._submit(self._next_turn(), requests)
        tenant = keyed[0]
        for item, request in enumerate(requests):
            if request.idempotency_key and request.tenant != tenant:
                # two tenants' keys live in two partitions: no one script holds both
                raise InvalidRequest(
                    "requests", "keyed items of one batch must share a tenant"
                ).for_item(item)
        return await self._submit(self._tenant_part(tenant), requests)

    async def _submit(
        self, index: int, requests: Sequence[model.SubmitRequest]
    ) -> list[model.SubmitResult]:
        """Submit to partition `index`, the others counted from their cached view."""
        part, s = self.parts[index], self.settings
        if len(self.parts) == 1:
            if len(requests) == 1:
                return [await part.submit(requests[0])]
            return await part.submit_batch(requests)
        view = await self._others.view(index, requests)
        tenant_live = max(view.tenants[request.tenant] for request in requests)
        caps = (
            max(s.max_live_per_tenant - tenant_live, 0),
            max(s.max_live_total - view.total, 0),
        )
        if len(requests) == 1:
            results = [await part.submit(requests[0], caps)]
        else:
            results = await part.submit_batch(requests, caps)
        admitted = [r for r, done in zip(requests, results, strict=True) if not done.reused]
        self._others.admitted(index, admitted)
        if admitted:
            self._occupancy.maybe(index)
        return [await self._positioned(index, result, view) for result in results]

    async def _positioned(
        self, index: int, result: model.SubmitResult, view: View
    ) -> model.SubmitResult:
        """A Submit's answer with the other partitions' queues counted in its position:
        a new job's from the view, a reused (older) one's as Get counts it."""
        job, position = result.job, result.job.queue_position
        if position is None:
            return result
        if result.reused:
            job = await self.get(job.tenant, job.id)
        else:
            ahead = view.ahead.get((job.model, job.priority, job.pool), 0)
            job = dataclasses.replace(job, queue_position=position + ahead)
        return model.SubmitResult(job, result.reused)

    # Reads ---------------------------------------------------------------------
    async def get(self, tenant: str | None, job_id: str, operation: str = "get") -> model.Job:
        index = partition_of(job_id, len(self.parts))
        job, score = await self.parts[index].get(tenant, job_id, operation)
        if len(self.parts) == 1 or job.queue_position is None:
            return job
        ahead = await position_elsewhere(self.connection, self.parts, index, job, score)
        return dataclasses.replace(job, queue_position=job.queue_position + ahead)

    async def read_for_watch(self, tenant: str | None, job_id: str) -> model.Job:
        """A waiter's read: queued behind other waiters, never failing for want of a connection."""
        async with self.waiter_reads:
            return await self.get(tenant, job_id, "watch")

    async def payload(self, tenant: str | None, job_id: str) -> bytes:
        return await self.part_of(job_id).payload(tenant, job_id)

    async def list_children(self, tenant: str | None, job_id: str) -> list[model.Job]:
        return await self.part_of(job_id).list_children(tenant, job_id)

    async def list_jobs(
        self,
        tenant: str | None,
        query: model.JobFilter,
        after: model.ListCursor | None,
        page_size: int,
    ) -> model.JobPage:
        parent = next((t.value for t in query.terms if t.field == "parent_id"), None)
        part = None if parent is None else partition_of(str(parent), len(self.parts))
        listers = [p.lister for p in self.parts]
        return await list_pages(listers, tenant, query, after, page_size, part)

    # Claim ---------------------------------------------------------------------
    async def claim_now(
        self, worker_id: str, models: list[str], max_jobs: int
    ) -> list[model.ClaimedJob]:
        """Claim up to max_jobs now, in claim order (no wait)."""
        if len(self.parts) == 1:
            return await self.owner.claim(worker_id, models, max_jobs)
        candidates = self._occupancy.candidates(models)
        if candidates is not None and len(candidates) <= 1:
            # nothing, or one partition with work: claim there, one round trip
            return await self._claim_in(candidates, worker_id, models, max_jobs)
        # plan again if other workers took all of what the plan found first
        for _ in range(PLAN_ROUNDS):
            plan = await self._plan(models, max_jobs, candidates)
            if not plan.counts:
                return []
            calls = [
                self.parts[index].claim(worker_id, models, count) for index, count in plan.counts
            ]
            claimed = [job for jobs in await self._all_or_release(calls, list) for job in jobs]
            if claimed:
                return plan.sort(claimed, len(self.parts))
        return []

    async def _claim_in(
        self, candidates: list[int], worker_id: str, models: list[str], max_jobs: int
    ) -> list[model.ClaimedJob]:
        """Claim from the one partition that may hold work (none: nothing to claim)."""
        if not candidates:
            return []
        index = candidates[0]
        began = self._occupancy.generations(models, [index])
        claimed = await self.parts[index].claim(worker_id, models, max_jobs)
        if len(claimed) < max_jobs:  # its queues of these classes ran dry
            self._occupancy.read(began, set(), complete=False)
        return claimed

    async def _plan(self, models: list[str], max_jobs: int, only: list[int] | None = None) -> _Plan:
        """Where the best `max_jobs` ready jobs are: (partition, jobs to claim there), best first.

        One pipeline reads the first max_jobs ids and scores of every ready
        queue of the models in every partition; the best are those of the
        highest priority, then the lowest score (the oldest by the partition's
        clock), then the lower partition. Each partition's claim script takes
        its queues' heads in the same order, so the plan merges sorted runs.
        O(partitions x models x priorities x log N).
        """
        indexes = range(len(self.parts)) if only is None else only
        commands: list[list[ArgValue]] = []
        queues: list[tuple[int, int, str]] = []  # (partition, priority rank, class) per command
        for index in indexes:
            part = self.parts[index]
            for rank, priority in enumerate(model.PRIORITIES_IN_CLAIM_ORDER):
                for job_class in models:
                    model_name, pool = class_parts(job_class)
                    queue = part.keys.queue(model_name, priority, pool)
                    commands.append(["ZRANGE", queue, 0, max_jobs - 1, "WITHSCORES"])
                    queues.append((index, rank, job_class))
        began = self._occupancy.generations(models, indexes)
        replies = await self.connection.read_pipelined("claim", commands)
        order: dict[str, Order] = {}
        nonempty: set[tuple[str, int]] = set()
        for (index, rank, job_class), heads in zip(queues, replies, strict=True):
            for member, score in _scored(heads):
                order[member.decode()] = (rank, score, index)
                nonempty.add((job_class, index))
        self._occupancy.read(began, nonempty, complete=only is None)
        counts: dict[int, int] = {}
        for _, _, index in heapq.nsmallest(max_jobs, order.values()):
            counts[index] = counts.get(index, 0) + 1  # dicts keep first-seen (best) order
        return _Plan(list(counts.items()), order)

    async def _all_or_release(
        self,
        calls: Sequence[Awaitable[T]],
        leases_of: Callable[[T], Iterable[model.ClaimedJob]],
    ) -> list[T]:
        """Run calls on several partitions at once; if one fails or the caller is
        gone, give back the leases the others made (nobody will receive them)."""
        gathered = asyncio.ensure_future(asyncio.gather(*calls, return_exceptions=True))
        try:
            # shielded: a caller cancelled now must not drop leases already made
            outcomes: list[T | BaseException] = await asyncio.shield(gathered)
        except asyncio.CancelledError:
            gathered.add_done_callback(lambda done: self._release_later(done, leases_of))
            raise
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            await self._release_quietly(outcomes, leases_of)
            raise failures[0]
        return [o for o in outcomes if not isinstance(o, BaseException)]

    def _release_later(
        self,
        done: asyncio.Future[list[Any]],
        leases_of: Callable[[Any], Iterable[model.ClaimedJob]],
    ) -> None:
        if done.cancelled():  # the loop is shutting down: the leases expire
            return
        task = asyncio.ensure_future(self._release_quietly(done.result(), leases_of))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _release_quietly(
        self, outcomes: list[Any], leases_of: Callable[[Any], Iterable[model.ClaimedJob]]
    ) -> None:
        leases = [
            lease
            for outcome in outcomes
            if not isinstance(outcome, BaseException)
            for lease in leases_of(outcome)
        ]
        with contextlib.suppress(StoreError):
            # a lease not given back expires after lease_timeout, as after a crash
            await self.release(leases)

    async def release(self, leases: Sequence[model.ClaimedJob]) -> int:
        by_part: dict[int, list[model.ClaimedJob]] = {}
        for lease in leases:
            by_part.setdefault(partition_of(lease.job.id, len(self.parts)), []).append(lease)
        counts = await asyncio.gather(
            *(self.parts[index].release(items) for index, items in by_part.items())
        )
        for index in by_part:
            self._occupancy.maybe(index)
        return sum(counts)

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> model.HeartbeatResult:
        return await self.part_of(job_id).heartbeat(job_id, lease_id, progress, stage)

    async def record_result(
        self, job_id: str, lease_id: str, report: model.ResultReport
    ) -> model.ResultRecorded:
        index = partition_of(job_id, len(self.parts))
        recorded = await self.parts[index].record_result(job_id, lease_id, report)
        self._occupancy.maybe(index)  # a retry, or a group's next child, may be queued
        return recorded

    async def report_and_claim(
        self, worker_id: str, models: list[str], results: Sequence[model.LeaseResult], max_jobs: int
    ) -> model.ReportedAndClaimed:
        """Each partition's results in one script, which also claims there if the
        plan says so; the plan's other partitions are claimed from at the same
        time. Atomic per partition, not across them."""
        if len(self.parts) == 1:
            return await self.owner.report_and_claim(worker_id, models, results, max_jobs)
        by_part: dict[int, list[int]] = {}
        for position, (job_id, _, _) in enumerate(results):
            by_part.setdefault(partition_of(job_id, len(self.parts)), []).append(position)
        candidates = self._occupancy.candidates(models) if max_jobs else []
        if candidates is not None and len(candidates) <= 1:
            # nothing to claim, or one partition with work: no read first
            chosen = _Plan([(candidates[0], max_jobs)] if candidates else [], {})
        else:
            chosen = await self._plan(models, max_jobs, candidates)
        plan = dict(chosen.counts)
        spare = max_jobs - sum(plan.values())
        if spare and by_part:
            # a result may queue a job where it ran (a group's next child):
            # as in one script, what the plan left over is claimed there too
            first = next(iter(by_part))
            plan[first] = plan.get(first, 0) + spare
        order = [*by_part, *(index for index in plan if index not in by_part)]
        calls = [
            self.parts[index].report_and_claim(
                worker_id,
                models if plan.get(index, 0) else [],
                [results[i] for i in by_part.get(index, [])],
                plan.get(index, 0),
            )
            for index in order
        ]
        steps = await self._all_or_release(calls, lambda step: step.claimed)
        for index in by_part:
            self._occupancy.maybe(index)
        answers: dict[int, model.ReportAnswer] = {}
        claimed: list[model.ClaimedJob] = []
        for index, step in zip(order, steps, strict=True):
            answers.update(zip(by_part.get(index, []), step.results, strict=True))
            claimed += step.claimed
        return model.ReportedAndClaimed(
            [answers[i] for i in range(len(results))], chosen.sort(claimed, len(self.parts))
        )

    async def cancel(
        self, tenant: str | None, job_id: str, reason: str = "", actor: str = ""
    ) -> model.CancelResult:
        index = partition_of(job_id, len(self.parts))
        result = await self.parts[index].cancel(tenant, job_id, reason, actor)
        self._occupancy.maybe(index)  # a cancelled child's group may queue its next child
        return result

    async def retry_job(self, tenant: str | None, job_id: str, actor: str = "") -> model.Job:
        """retry_job.lua in the job's partition; on several, the caps count the
        others' live jobs from the cached view Submit uses (at most a second old)."""
        index = partition_of(job_id, len(self.parts))
        self._occupancy.maybe(index)  # it queues work there
        if len(self.parts) == 1:
            return await self.owner.retry_job(tenant, job_id, actor)
        owner = (await self.parts[index].get(tenant, job_id, "retry_job"))[0].tenant
        view = await self._others.view(index, [model.SubmitRequest(owner, model.GroupSpec(()))])
        s = self.settings
        caps = (
            max(s.max_live_per_tenant - view.tenants[owner], 0),
            max(s.max_live_total - view.total, 0),
        )
        job = await self.parts[index].retry_job(tenant, job_id, actor, caps)
        if job.queue_position is None:
            return job
        return await self.get(tenant, job_id, "retry_job")  # its position over every partition

    # Recovery ------------------------------------------------------------------
    async def recover(self) -> list[model.JobEvent]:
        events: list[model.JobEvent] = []
        due = await recovery.due(self.connection, self.parts)
        for index, part in enumerate(self.parts):
            if not due[index].anything:
                continue
            # one after another: recovery's own pool has two connections
            found = await recovery.recover(part, due[index])
            if found:
                self._occupancy.maybe(index)
            events += found
        return events

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        # one leader per deployment (it recovers every partition): partition 0's key
        return await self.owner.acquire_leadership(holder, ttl)

    # Events (store/redis/events.py merges several partitions' streams) -----------
    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[model.JobEvent]:
        if len(self.parts) == 1:
            return await self.owner.reads.events(after, count, block)
        return await self._events.events(after, count, block)

    def waiting_event_reads(self) -> int:
        """Blocking events reads waiting for a notification (tests, debugging)."""
        return self._events.waiting

    async def newest_event_id(self) -> str:
        if len(self.parts) == 1:
            return await self.owner.reads.newest_event_id()
        return await self._events.newest_event_id()

    # Gauges ----------------------------------------------------------------------
    async def ready_counts(self) -> dict[tuple[str, model.Priority, str], int]:
        totals: dict[tuple[str, model.Priority, str], int] = {}
        for counts in await asyncio.gather(*(part.reads.ready_counts() for part in self.parts)):
            for queue, size in counts.items():
                totals[queue] = totals.get(queue, 0) + size
        return totals

    async def in_flight(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for counts in await asyncio.gather(*(part.reads.in_flight() for part in self.parts)):
            for model_name, count in counts.items():
                totals[model_name] = totals.get(model_name, 0) + count
        return totals

    # The fleet (store/redis/fleet.py: the registry lives in partition 0) -----------
    async def record_workers(self, seen: Sequence[model.WorkerSighting]) -> None:
        await self.fleet.record(seen)

    async def list_workers(self) -> list[model.WorkerInfo]:
        return await self.fleet.workers()

    async def queue_stats(self) -> list[model.QueueStats]:
        return await self.fleet.queue_stats()

    async def demand(self, model: str, pool: str | None) -> int:
        return await self.fleet.demand(model, pool)


def _id_source(ids: PartitionIds, index: int) -> Callable[[], str]:
    return lambda: ids.new(index)
