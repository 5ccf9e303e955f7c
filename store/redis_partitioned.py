"""PartitionedRedisStore: one deployment's state spread over N hash tags (--redis-partitions).

Each partition is a RedisStore of its own hash tag ("<name>/<i>", so one
slot: on Redis Cluster the partitions spread over the masters); all of them
share one set of connections, the scripts and one notifier (the first
partition's, subscribed to every partition's channel: on Cluster one
sharded subscription per master; see RedisStore.sibling). docs/redis-layout.md,
"Partitions", gives the rules; in short:

* A job id names its partition: crc32(id) % N. Ids are ULIDs drawn, in
  this process, in increasing order until one lands in the wanted partition;
  a group's children are drawn in the parent's partition.
* An unkeyed Submit goes to the next partition in turn; a keyed one (and a
  BatchSubmit holding a keyed item) to its tenant's partition, crc32(tenant)
  % N, where its idempotency key lives: each script stays on one slot and a
  key always finds its original.
* Every call on a job goes straight to the id's partition.
* A claim reads the heads of its models' ready queues, with their scores,
  in every partition (one pipeline), takes the best priority's jobs of the
  lowest score (each partition's clock in µs, strictly increasing; the
  lower partition index on a tie), one claim script per partition chosen,
  and waits on any partition's "r <model>" notification when nothing is
  claimable.
* Queue position sums the partitions' counts (in the others: ZCOUNT below
  the job's score, O(log N)); the audit stream is every partition's stream
  merged, with cursors that hold one position per partition.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import contextvars
import dataclasses
import heapq
import itertools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from store import redis_store
from store.errors import (
    FailureHook,
    InvalidRequest,
    StoreError,
    ignore_failure,
    reporting,
)
from store.keys import partition_tags
from store.model import (
    PRIORITIES_IN_CLAIM_ORDER,
    CancelResult,
    ClaimedJob,
    HeartbeatResult,
    Job,
    JobEvent,
    JobSpec,
    JobStatus,
    Priority,
    ReportAnswer,
    ReportedAndClaimed,
    ResultRecorded,
    ResultReport,
    StoreSettings,
    SubmitRequest,
    SubmitResult,
)
from store.policy import claim_limit, claim_models
from store.protocol import Store
from store.redis_notify import ANY_MESSAGE
from store.redis_poll import long_poll
from store.redis_scripts import ArgValue
from store.redis_store import Elsewhere, RedisStore

T = TypeVar("T")

# Operations already reported to on_failure by the call under way (see _fan_out).
_REPORTED: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "jobgate_partitions_reported", default=None
)

# A claim whose plan met only jobs other workers took first plans again, at
# most this many times before it waits for a notification.
PLAN_ROUNDS = 8
# Separates the partitions' stream positions in an event cursor.
CURSOR_SEPARATOR = ","

# Crockford's base32, ULID's alphabet.
_BASE32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_SUFFIX_BITS = 10  # the last two characters of a ULID
_SUFFIXES = [(a + b).encode() for a in _BASE32 for b in _BASE32]
_RANDOM_BITS = 80


def partition_of(key: str, partitions: int) -> int:
    """The partition of a job id or a tenant: crc32 % partitions."""
    return binascii.crc32(key.encode()) % partitions


def _ulid_text(value: int) -> str:
    return "".join(_BASE32[(value >> shift) & 31] for shift in range(125, -1, -5))


class PartitionIds:
    """ULIDs in increasing order (within this process), each in the partition asked for.

    Drawn by rejection: the next values after the last id are tried until
    one's crc32 lands in the partition (N tries expected). The last two
    characters vary fastest, so a try costs one crc32 of two bytes over the
    prefix's. Claim order does not rest on ids (queue scores decide it).
    """

    def __init__(self, partitions: int) -> None:
        self._partitions = partitions
        self._last = 0

    def new(self, partition: int) -> str:
        now = time.time_ns() // 1_000_000
        fresh = (now << _RANDOM_BITS) | random.getrandbits(_RANDOM_BITS - 1)
        value = max(fresh, self._last + 1)
        while True:
            block = value >> _SUFFIX_BITS
            prefix = _ulid_text(block << _SUFFIX_BITS)[:-2]
            crc = binascii.crc32(prefix.encode())
            for low in range(value & ((1 << _SUFFIX_BITS) - 1), 1 << _SUFFIX_BITS):
                if binascii.crc32(_SUFFIXES[low], crc) % self._partitions == partition:
                    self._last = (block << _SUFFIX_BITS) | low
                    return prefix + _SUFFIXES[low].decode()
            value = (block + 1) << _SUFFIX_BITS


#: How often a blocking events read re-reads on a store that does not hear changes.
UNHEARD_EVENTS_POLL = 0.5


def _recheck() -> float:
    # read at call time, so tests that push RedisStore's safety re-check
    # away (monkeypatch) push this one too
    return redis_store.SAFETY_RECHECK * random.uniform(0.8, 1.2)


_RANK = {priority: rank for rank, priority in enumerate(PRIORITIES_IN_CLAIM_ORDER)}


def _up_to(priority: Priority) -> tuple[Priority, ...]:
    """The priorities claimed before `priority`, then itself."""
    return PRIORITIES_IN_CLAIM_ORDER[: _RANK[priority] + 1]


# Claim order across partitions: (priority rank, queue score, partition index).
Order = tuple[int, float, int]


@dataclasses.dataclass
class _Plan:
    """What one read of the queues' heads chose, and the order of every head it saw."""

    counts: list[tuple[int, int]]  # (partition, jobs to claim there), best first
    order: dict[str, Order]  # job id -> its place in claim order

    def sort(self, claimed: Iterable[ClaimedJob], partitions: int) -> list[ClaimedJob]:
        """Leases in claim order; a job the plan did not see (others took the
        ones it saw first) sorts after its priority's seen ones."""

        def place(lease: ClaimedJob) -> tuple[Order, str]:
            job = lease.job
            unseen = (_RANK[job.priority], float("inf"), partition_of(job.id, partitions))
            return self.order.get(job.id, unseen), job.id

        return sorted(claimed, key=place)


def _scored(reply: Sequence[Any]) -> list[tuple[bytes, float]]:
    """A ZRANGE ... WITHSCORES reply as (member, score) pairs, flat (RESP2) or paired (RESP3)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [(bytes(member), float(score)) for member, score in reply]
    return [(bytes(reply[i]), float(reply[i + 1])) for i in range(0, len(reply), 2)]


def _count_bound(score: str, other: int, index: int) -> str:
    """ZCOUNT's max bound in partition `other` for a job of partition `index`:
    on an equal score the lower partition index is claimed first."""
    return score if other < index else "(" + score


class PartitionedRedisStore(Store):
    """The Store protocol over `partitions` RedisStores (2..MAX_PARTITIONS)."""

    def __init__(
        self,
        url: str,
        settings: StoreSettings,
        partition: str = "default",
        partitions: int = 2,
        hear_ready: bool = True,
        hear_changes: bool = True,
    ) -> None:
        """`hear_ready` / `hear_changes`: the notification channels subscribed (RedisStore)."""
        tags = partition_tags(partition, partitions)  # ValueError outside 1..MAX_PARTITIONS
        if len(tags) < 2:
            raise ValueError("one partition is a plain RedisStore (open_store builds it)")
        self.settings = settings
        # the audit cap is the deployment's: each partition keeps its share
        share = dataclasses.replace(
            settings, events_max_length=-(-settings.events_max_length // partitions)
        )
        owner = RedisStore(url, share, tags[0], hear_ready, hear_changes)
        self.parts = [owner, *(owner.sibling(tag) for tag in tags[1:])]
        self._ids = PartitionIds(partitions)
        for index, part in enumerate(self.parts):
            part.new_id = self._id_source(index)
            part.position_elsewhere = self._position_source(index)
            part.before_submit = self._submit_source(index)
        # unkeyed submits go round the partitions, from a random start so
        # that gateways started together do not fill partition 0 first
        self._turn = itertools.count(random.randrange(partitions))
        self._on_failure: FailureHook = ignore_failure
        self.on_failure = ignore_failure  # the partitions report through _report
        self._closed = False
        self._pending: set[asyncio.Future[None]] = set()  # releases of abandoned claims
        self._event_waits = 0

    @property
    def on_failure(self) -> FailureHook:
        return self._on_failure

    @on_failure.setter
    def on_failure(self, hook: FailureHook) -> None:
        self._on_failure = hook
        for part in self.parts:
            part.on_failure = self._report

    def _report(self, operation: str) -> None:
        """A partition's failure, counted once per call however many partitions it spanned."""
        reported = _REPORTED.get()
        if reported is not None:
            if operation in reported:
                return
            reported.add(operation)
        self._on_failure(operation)

    async def _fan_out(self, calls: Iterable[Awaitable[T]]) -> list[T]:
        """The calls at once, on several partitions; a failure is reported once."""
        token = _REPORTED.set(set())  # the gathered tasks copy the context, sharing this set
        try:
            return list(await asyncio.gather(*calls))
        finally:
            _REPORTED.reset(token)

    @property
    def owner(self) -> RedisStore:
        """Partition 0, whose connections and notifier every partition uses."""
        return self.parts[0]

    def _id_source(self, index: int) -> Callable[[], str]:
        return lambda: self._ids.new(index)

    def _position_source(self, index: int) -> Callable[[Job, str], Awaitable[int]]:
        return lambda job, score: self._position_elsewhere(index, job, score)

    def _submit_source(
        self, index: int
    ) -> Callable[[Sequence[SubmitRequest]], Awaitable[Elsewhere]]:
        return lambda requests: self._before_submit(index, requests)

    def part_of(self, job_id: str) -> RedisStore:
        """The partition holding `job_id`."""
        return self.parts[partition_of(job_id, len(self.parts))]

    # Lifecycle -----------------------------------------------------------------
    async def open(self) -> None:
        await self.owner.open()

    async def close(self) -> None:
        self._closed = True
        # releases of abandoned claims still need the connections
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=redis_store.RELEASE_GRACE)
        await asyncio.gather(*(part.close() for part in self.parts[1:]))
        await self.owner.close()

    async def ping(self) -> None:
        await self.owner.ping()

    # Submit --------------------------------------------------------------------
    def _next_turn(self) -> RedisStore:
        return self.parts[next(self._turn) % len(self.parts)]

    def _tenant_part(self, tenant: str) -> RedisStore:
        return self.parts[partition_of(tenant, len(self.parts))]

    async def submit(self, request: SubmitRequest) -> SubmitResult:
        if request.idempotency_key:
            return await self._tenant_part(request.tenant).submit(request)
        return await self._next_turn().submit(request)

    async def submit_batch(self, requests: Sequence[SubmitRequest]) -> list[SubmitResult]:
        keyed = [request.tenant for request in requests if request.idempotency_key]
        if not keyed:
            return await self._next_turn().submit_batch(requests)
        tenant = keyed[0]
        for index, request in enumerate(requests):
            if request.idempotency_key and request.tenant != tenant:
                # two tenants' keys live in two partitions: no one script holds both
                raise InvalidRequest(
                    "requests", "keyed items of one batch must share a tenant"
                ).for_item(index)
        return await self._tenant_part(tenant).submit_batch(requests)

    async def _before_submit(self, index: int, requests: Sequence[SubmitRequest]) -> Elsewhere:
        """What the partitions but `index` hold, for a submit there: live counts and queues.

        One pipelined read before the submit script, which checks its own
        partition atomically: concurrent submits to several partitions may
        pass a cap together (see docs/redis-layout.md, "Partitions"). The
        queues give a new job's position: its score is its partition's
        newest, so every ready job of its class and above elsewhere is ahead
        of it (on Cluster, up to a master whose clock runs ahead).
        """
        tenants = sorted({request.tenant for request in requests})
        classes = sorted(
            {(r.work.model, r.priority) for r in requests if isinstance(r.work, JobSpec)}
        )
        others = [part for other, part in enumerate(self.parts) if other != index]
        commands: list[list[ArgValue]] = []
        for part in others:
            commands.append(["GET", part.keys.live_total])
            commands += [["HGET", part.keys.live, tenant] for tenant in tenants]
            for model, priority in classes:
                commands += [["ZCARD", part.keys.queue(model, p)] for p in _up_to(priority)]
        replies = iter(await self.owner.read_pipelined("submit", commands))
        total = 0
        live = dict.fromkeys(tenants, 0)
        ahead = dict.fromkeys(classes, 0)
        for _ in others:
            total += int(next(replies) or 0)
            for tenant in tenants:
                live[tenant] += int(next(replies) or 0)
            for job_class in classes:
                ahead[job_class] += sum(int(next(replies)) for _ in _up_to(job_class[1]))
        return Elsewhere(max(live.values(), default=0), total, ahead)

    # Reads ---------------------------------------------------------------------
    async def get(self, tenant: str, job_id: str) -> Job:
        return await self.part_of(job_id).get(tenant, job_id)

    async def payload(self, tenant: str, job_id: str) -> bytes:
        return await self.part_of(job_id).payload(tenant, job_id)

    async def list_children(self, tenant: str, job_id: str) -> list[Job]:
        return await self.part_of(job_id).list_children(tenant, job_id)

    async def _position_elsewhere(self, index: int, job: Job, score: str) -> int:
        """Jobs the other partitions queue ahead of `job` (its partition counted it already).

        Ahead, in claim order: every ready job of a higher priority, and of its
        own priority those of a lower queue score than `score` (the job's),
        or an equal one in a lower partition. One position_elsewhere.lua (a
        ZCOUNT and ZCARDs) per other partition, in one pipeline;
        O(partitions x log N).
        """
        calls = [
            (
                [part.keys.queue(job.model, job.priority)]
                + [part.keys.queue(job.model, p) for p in _up_to(job.priority)[:-1]],
                [_count_bound(score, other, index)],
            )
            for other, part in enumerate(self.parts)
            if other != index
        ]
        replies = await self.owner.run_pipelined("get", "position_elsewhere", calls)
        return sum(int(reply) for reply in replies)

    # Claim ---------------------------------------------------------------------
    async def claim(
        self,
        worker_id: str,
        models: Sequence[str],
        max_jobs: int = 1,
        wait: timedelta = timedelta(0),
    ) -> list[ClaimedJob]:
        models = claim_models(models)
        if not models:
            return []
        max_jobs = claim_limit(max_jobs)
        return await long_poll(
            self.owner.listen((f"r {model}" for model in models), wake_one=True),
            lambda: self._claim_now(worker_id, models, max_jobs),
            wait,
            closed=lambda: self._closed,
            reads=self.owner.waiter_reads,
            on_failure=self.on_failure,
            recheck=_recheck,
        )

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` on this store (tests, debugging)."""
        return self.owner.waiting_claims(model)

    async def _plan(self, models: list[str], max_jobs: int) -> _Plan:
        """Where the best `max_jobs` ready jobs are: (partition, jobs to claim there), best first.

        One pipeline reads the first max_jobs ids and scores of every ready
        queue of the models in every partition; the best are those of the
        highest priority, then the lowest score (the oldest by the partition's
        clock), then the lower partition. Each partition's claim script takes
        its queues' heads in the same order, so the plan merges sorted runs.
        O(partitions x models x priorities x log N).
        """
        commands: list[list[ArgValue]] = []
        queues: list[tuple[int, int]] = []  # (partition, priority rank) per command
        for index, part in enumerate(self.parts):
            for rank, priority in enumerate(PRIORITIES_IN_CLAIM_ORDER):
                for model in models:
                    queue = part.keys.queue(model, priority)
                    commands.append(["ZRANGE", queue, 0, max_jobs - 1, "WITHSCORES"])
                    queues.append((index, rank))
        replies = await self.owner.read_pipelined("claim", commands)
        order = {
            member.decode(): (rank, score, index)
            for (index, rank), heads in zip(queues, replies, strict=True)
            for member, score in _scored(heads)
        }
        counts: dict[int, int] = {}
        for _, _, index in heapq.nsmallest(max_jobs, order.values()):
            counts[index] = counts.get(index, 0) + 1  # dicts keep first-seen (best) order
        return _Plan(list(counts.items()), order)

    async def _claim_now(
        self, worker_id: str, models: list[str], max_jobs: int
    ) -> list[ClaimedJob]:
        """Claim what the plan finds; plan again if other workers took all of it first."""
        for _ in range(PLAN_ROUNDS):
            plan = await self._plan(models, max_jobs)
            if not plan.counts:
                return []
            calls = [
                self.parts[index].claim(worker_id, models, count) for index, count in plan.counts
            ]
            claimed = [job for jobs in await self._all_or_release(calls, list) for job in jobs]
            if claimed:
                return plan.sort(claimed, len(self.parts))
        return []

    async def _all_or_release(
        self,
        calls: Sequence[Awaitable[T]],
        leases_of: Callable[[T], Iterable[ClaimedJob]],
    ) -> list[T]:
        """Run calls on several partitions at once; if one fails or the caller is
        gone, give back the leases the others made (nobody will receive them)."""
        token = _REPORTED.set(set())  # one failure report per call (see _fan_out)
        try:
            gathered = asyncio.ensure_future(asyncio.gather(*calls, return_exceptions=True))
        finally:
            _REPORTED.reset(token)
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
        self, done: asyncio.Future[list[Any]], leases_of: Callable[[Any], Iterable[ClaimedJob]]
    ) -> None:
        if done.cancelled():  # the loop is shutting down: the leases expire
            return
        task = asyncio.ensure_future(self._release_quietly(done.result(), leases_of))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _release_quietly(
        self, outcomes: list[Any], leases_of: Callable[[Any], Iterable[ClaimedJob]]
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

    async def release(self, leases: Sequence[ClaimedJob]) -> int:
        by_part: dict[int, list[ClaimedJob]] = {}
        for lease in leases:
            by_part.setdefault(partition_of(lease.job.id, len(self.parts)), []).append(lease)
        counts = await self._fan_out(
            self.parts[index].release(items) for index, items in by_part.items()
        )
        return sum(counts)

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> HeartbeatResult:
        return await self.part_of(job_id).heartbeat(job_id, lease_id, progress, stage)

    async def record_result(
        self, job_id: str, lease_id: str, report: ResultReport
    ) -> ResultRecorded:
        return await self.part_of(job_id).record_result(job_id, lease_id, report)

    async def report_and_claim(
        self,
        worker_id: str,
        models: Sequence[str],
        results: Sequence[tuple[str, str, ResultReport]],
        max_jobs: int,
    ) -> ReportedAndClaimed:
        """Each partition's results in one script, which also claims there if the
        plan says so; the plan's other partitions are claimed from at the same
        time. Atomic per partition, not across them."""
        for _, _, report in results:
            if report.status not in (JobStatus.COMPLETED, JobStatus.FAILED):
                raise InvalidRequest("status", "must be COMPLETED or FAILED")
        models = claim_models(models) if max_jobs > 0 else []
        max_jobs = claim_limit(max_jobs) if models else 0
        by_part: dict[int, list[int]] = {}
        for position, (job_id, _, _) in enumerate(results):
            by_part.setdefault(partition_of(job_id, len(self.parts)), []).append(position)
        chosen = await self._plan(models, max_jobs) if max_jobs else _Plan([], {})
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
                worker_id, models, [results[i] for i in by_part.get(index, [])], plan.get(index, 0)
            )
            for index in order
        ]
        steps = await self._all_or_release(calls, lambda step: step.claimed)
        answers: dict[int, ReportAnswer] = {}
        claimed: list[ClaimedJob] = []
        for index, step in zip(order, steps, strict=True):
            answers.update(zip(by_part.get(index, []), step.results, strict=True))
            claimed += step.claimed
        return ReportedAndClaimed(
            [answers[i] for i in range(len(results))], chosen.sort(claimed, len(self.parts))
        )

    async def cancel(self, tenant: str, job_id: str, reason: str = "") -> CancelResult:
        return await self.part_of(job_id).cancel(tenant, job_id, reason)

    # Recovery ------------------------------------------------------------------
    async def recover(self) -> list[JobEvent]:
        events: list[JobEvent] = []
        for part in self.parts:
            # one after another: recovery's own pool has two connections
            events += await part.recover()
        return events

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        # one leader per deployment (it recovers every partition): partition 0's key
        return await self.owner.acquire_leadership(holder, ttl)

    # Watch and events ------------------------------------------------------------
    def watch(self, tenant: str, job_id: str) -> AsyncIterator[Job]:
        # the partition's watch hears every partition's queue moves (one
        # notifier) and reads positions summed (position_elsewhere)
        return self.part_of(job_id).watch(tenant, job_id)

    def _cursor(self, after: str) -> list[str]:
        """One stream position per partition; a plain stream id applies to every one."""
        positions = after.split(CURSOR_SEPARATOR)
        if len(positions) == 1:
            return positions * len(self.parts)
        if len(positions) != len(self.parts):
            raise InvalidRequest(
                "after", f"an event cursor of {len(self.parts)} partitions, got {after!r}"
            )
        return positions

    async def events(
        self,
        after: str = "0",
        count: int = 100,
        block: timedelta | None = None,
    ) -> list[JobEvent]:
        """The partitions' streams merged in stream-id (time) order.

        Each event's id is the cursor after it (every partition's position),
        so reading on from it misses and repeats nothing, even when a
        partition appends an event older than ones already read.
        """
        cursor = self._cursor(after)
        if block is None:
            return await self._read_events(cursor, count)
        if not self.owner.hears(ANY_MESSAGE):
            return await self._poll_events(cursor, count, block)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block.total_seconds()
        with self.owner.listen([ANY_MESSAGE]) as listener:
            while True:
                listener.clear()  # before the read: an event after it wakes us
                page = await self._read_events(cursor, count)
                remaining = deadline - loop.time()
                if page or remaining <= 0 or self._closed:
                    return page
                self._event_waits += 1
                try:
                    with reporting(self.on_failure, "events"):
                        # the re-check also bounds an event whose script published nothing
                        await listener.wait(min(remaining, _recheck()))
                finally:
                    self._event_waits -= 1

    async def _poll_events(self, cursor: list[str], count: int, block: timedelta) -> list[JobEvent]:
        """events(block=...) on a store that does not hear the changes channel.

        Nothing would wake a listener, so the read is made again every
        UNHEARD_EVENTS_POLL until the block ends: the worker-server's audit
        log (it may lead recovery) reads this way, with its own 0.5 s block.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + block.total_seconds()
        while True:
            page = await self._read_events(cursor, count)
            remaining = deadline - loop.time()
            if page or remaining <= 0 or self._closed:
                return page
            await asyncio.sleep(min(remaining, UNHEARD_EVENTS_POLL))

    def waiting_event_reads(self) -> int:
        """Blocking events reads waiting for a notification (tests, debugging)."""
        return self._event_waits

    async def _read_events(self, cursor: list[str], count: int) -> list[JobEvent]:
        pages = await self._fan_out(
            part.events(after=at, count=count) for part, at in zip(self.parts, cursor, strict=True)
        )
        merged = heapq.merge(*(_in_stream_order(index, page) for index, page in enumerate(pages)))
        positions = list(cursor)
        events: list[JobEvent] = []
        for _, index, event in itertools.islice(merged, count):
            positions[index] = event.id
            events.append(dataclasses.replace(event, id=CURSOR_SEPARATOR.join(positions)))
        return events

    async def newest_event_id(self) -> str:
        newest = await self._fan_out(part.newest_event_id() for part in self.parts)
        if all(position == "0" for position in newest):
            return "0"
        return CURSOR_SEPARATOR.join(newest)

    # Gauges ----------------------------------------------------------------------
    async def queue_depths(self) -> dict[tuple[str, Priority], int]:
        totals: dict[tuple[str, Priority], int] = {}
        for depths in await self._fan_out(part.queue_depths() for part in self.parts):
            for pair, size in depths.items():
                totals[pair] = totals.get(pair, 0) + size
        return totals

    async def in_flight(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for counts in await self._fan_out(part.in_flight() for part in self.parts):
            for model, count in counts.items():
                totals[model] = totals.get(model, 0) + count
        return totals


def _in_stream_order(
    index: int, page: list[JobEvent]
) -> Iterator[tuple[tuple[int, int], int, JobEvent]]:
    for event in page:
        yield _stream_order(event.id), index, event


def _stream_order(stream_id: str) -> tuple[int, int]:
    millis, _, sequence = stream_id.partition("-")
    return int(millis), int(sequence or 0)
