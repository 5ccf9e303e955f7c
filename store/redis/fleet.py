"""RedisEngine's fleet reads and its worker registry (ListWorkers, ListQueues, KEDA).

The registry lives in partition 0 (the deployment's owner, as the recovery
leader key does): a hash of each worker's pool and models and a sorted set
of when each was last seen, by Redis' clock. A worker-server writes a batch
of sightings with one record_workers.lua (one ZADD GT, one HSET and a trim
for the whole batch); ListWorkers reads it with read_workers.lua, then the
live leases of every partition (one pipeline: ZRANGEBYSCORE of each leases
set above the clock) and their jobs' worker ids (one pipeline of HGET):
three round trips, O(registered workers + live leases).

`queue_stats` and `demand` count per (model, priority, pool); their costs
are in their docstrings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from store import workers
from store.fields import ms_to_datetime, to_ms
from store.model import (
    PRIORITIES_IN_CLAIM_ORDER,
    Priority,
    QueueStats,
    StoreSettings,
    WorkerInfo,
    WorkerSighting,
)
from store.policy import class_parts, queue_class
from store.redis.connection import Connection, text
from store.redis.partition import Partition
from store.redis.scripts import ArgValue

#: Queue heads read per queue in the first round of the oldest-QUEUED scan.
OLDEST_PAGE = 8
#: How far (µs) a queue score may run ahead of its job's first-queued time:
#: one script queueing n jobs at once (a batch, a group) gives them the
#: clock + 0..n-1 µs (includes/common.lua next_seq); 1000 jobs is 1 ms.
SCORE_AHEAD_US = 2000

QueueKey = tuple[int, str, Priority, str]  # (partition, model, priority, pool)
StatsKey = tuple[str, Priority, str]  # (model, priority, pool)
#: Under fair share, the heads per queue the oldest-QUEUED scan reads.
FAIR_SCAN = 256


def _pairs(reply: Sequence[Any]) -> list[tuple[str, float]]:
    """A ... WITHSCORES reply as (member, score), flat (RESP2) or paired (RESP3)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [(text(member), float(score)) for member, score in reply]
    return [(text(reply[i]), float(reply[i + 1])) for i in range(0, len(reply), 2)]


def _info(pool: str, models: Sequence[str]) -> str:
    return json.dumps({"pool": pool, "models": list(models)}, separators=(",", ":"))


def _registered(worker_id: str, seen: object, info: object) -> WorkerInfo:
    decoded = json.loads(text(info)) if info else {}
    pool, models = decoded.get("pool", ""), tuple(decoded.get("models", ()))
    return WorkerInfo(worker_id, pool, models, ms_to_datetime(int(float(text(seen)))))


class RedisFleet:
    """The registry and the fleet reads over a deployment's partitions."""

    def __init__(
        self, connection: Connection, parts: Sequence[Partition], settings: StoreSettings
    ) -> None:
        self._connection = connection
        self._parts = parts
        self._settings = settings
        self._owner = parts[0].keys  # the registry's partition

    # The registry ------------------------------------------------------------------
    async def record(self, seen: Sequence[WorkerSighting]) -> None:
        args: list[ArgValue] = [to_ms(workers.retention(self._settings))]
        for sighting in seen:
            info = "" if sighting.pool is None else _info(sighting.pool, sighting.models)
            args += [sighting.worker_id, max(to_ms(sighting.age), 0), info]
        keys = [self._owner.workers, self._owner.workers_seen]
        await self._connection.run("record_workers", "record_workers", keys, args)

    async def workers(self) -> list[WorkerInfo]:
        keys = [self._owner.workers, self._owner.workers_seen]
        now_ms, flat = await self._connection.run("list_workers", "read_workers", keys, [])
        registered = [
            _registered(text(flat[i]), flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)
        ]
        live = f"({int(now_ms)}"
        replies = await self._connection.read_pipelined(
            "list_workers",
            [
                ["ZRANGEBYSCORE", part.keys.leases, live, "+inf", "WITHSCORES"]
                for part in self._parts
            ],
        )
        leases = [
            (part, job_id, deadline)
            for part, reply in zip(self._parts, replies, strict=True)
            for job_id, deadline in _pairs(reply)
        ]
        owners = (
            await self._connection.read_pipelined(
                "list_workers",
                [["HGET", part.keys.job(job_id), "worker_id"] for part, job_id, _ in leases],
            )
            if leases
            else []
        )
        held = [
            workers.Held(job_id, text(owner) if owner else "", ms_to_datetime(int(deadline)))
            for (_, job_id, deadline), owner in zip(leases, owners, strict=True)
        ]
        now = ms_to_datetime(int(now_ms))
        return workers.listed(registered, held, now, self._settings.lease_timeout)

    # Queues ---------------------------------------------------------------------
    async def demand(self, model: str, pool: str | None) -> int:
        """QUEUED (claimable) + PROCESSING jobs of `model` that workers of `pool` could take
        (bound to it or to any pool; every job of the model when pool is None): KEDA's
        metric. One pipeline of ZCARDs and HGETs per partition (after the queue
        classes, when pool is None), O(partitions x classes x priorities)."""
        if pool is None:
            pools = sorted({c[1] for c in await self._classes() if c[0] == model} | {""})
        else:
            pools = sorted({pool, ""})
        commands: list[list[ArgValue]] = []
        for part in self._parts:
            for each in pools:
                commands += [
                    ["ZCARD", part.keys.queue(model, p, each)] for p in PRIORITIES_IN_CLAIM_ORDER
                ]
                commands.append(["HGET", part.keys.in_flight, queue_class(model, each)])
        replies = await self._connection.read_pipelined("demand", commands)
        return sum(int(reply or 0) for reply in replies)

    async def _classes(self) -> set[tuple[str, str]]:
        """Every (model, pool) ever submitted to, in any partition."""
        members = await self._connection.read_pipelined(
            "queue_stats", [["SMEMBERS", part.keys.models] for part in self._parts]
        )
        return {class_parts(text(member)) for each in members for member in each}

    async def queue_stats(self) -> list[QueueStats]:
        """One entry per (model, priority, pool) with queued or processing jobs.

        Queued means claimable (a job waiting out a retry backoff is not).
        Round trips: the queue classes; the queue sizes and every partition's
        leases; the leased jobs' model, priority and pool (O(live leases)); then
        the oldest-job scan (`_oldest`).
        """
        classes = sorted(await self._classes())
        queues: list[QueueKey] = [
            (index, model, priority, pool)
            for index in range(len(self._parts))
            for model, pool in classes
            for priority in PRIORITIES_IN_CLAIM_ORDER
        ]
        commands: list[list[ArgValue]] = [
            ["ZCARD", self._parts[index].keys.queue(model, priority, pool)]
            for index, model, priority, pool in queues
        ]
        commands += [["ZRANGE", part.keys.leases, 0, -1] for part in self._parts]
        replies = await self._connection.read_pipelined("queue_stats", commands)
        sizes = dict(zip(queues, (int(size) for size in replies[: len(queues)]), strict=True))
        leased = [
            (index, text(job_id))
            for index, ids in enumerate(replies[len(queues) :])
            for job_id in ids
        ]
        processing = await self._processing(leased)
        nonempty = [queue for queue, size in sizes.items() if size]
        if self._settings.fair_share:
            oldest = await self._oldest_fair(nonempty)
        else:
            oldest = await self._oldest(nonempty)
        return _stats(sizes, processing, oldest)

    async def _processing(self, leased: list[tuple[int, str]]) -> dict[StatsKey, int]:
        if not leased:
            return {}
        replies = await self._connection.read_pipelined(
            "queue_stats",
            [
                ["HMGET", self._parts[i].keys.job(job_id), "model", "priority", "pool"]
                for i, job_id in leased
            ],
        )
        counts: dict[StatsKey, int] = {}
        for model, priority, pool in replies:
            if model and priority:  # a record gone meanwhile is not counted
                key = (text(model), Priority(int(priority)), text(pool) if pool else "")
                counts[key] = counts.get(key, 0) + 1
        return counts

    async def _oldest_fair(self, queues: list[QueueKey]) -> dict[StatsKey, int]:
        """Under fair share: when the longest-waiting of each queue's next FAIR_SCAN jobs
        became QUEUED (ms).

        Scores are passes, not times, so no prefix of a queue holds its oldest
        job for sure; but each tenant's jobs are in submit order (FIFO), so a
        tenant's oldest is its first in the queue. The scan reads the first
        FAIR_SCAN ids of each queue and their update_time (two pipelined round
        trips, O(queues x FAIR_SCAN)): exact when a queue holds at most
        FAIR_SCAN jobs or its tenants' first jobs are among them.
        """
        if not queues:
            return {}
        pages = await self._heads(queues, 0, FAIR_SCAN)
        reads = [
            ["HGET", self._parts[queue[0]].keys.job(job_id), "update_time"]
            for queue, page in zip(queues, pages, strict=True)
            for job_id, _ in page
        ]
        stamps = iter(await self._connection.read_pipelined("queue_stats", reads))
        oldest: dict[StatsKey, int] = {}
        for (_, model, priority, pool), page in zip(queues, pages, strict=True):
            for stamp in (next(stamps) for _ in page):
                if stamp:
                    key = (model, priority, pool)
                    oldest[key] = min(oldest.get(key, int(stamp)), int(stamp))
        return oldest

    async def _oldest(self, queues: list[QueueKey]) -> dict[StatsKey, int]:
        """Fair share off: when the longest-waiting job of each queue became QUEUED (ms).

        A job's queue score is when it was first queued (µs, at most
        SCORE_AHEAD_US ahead); a requeued job keeps its score but became
        QUEUED later (its update_time, ms). So no job at or after a score s
        became QUEUED before s - SCORE_AHEAD_US, and the scan of a queue,
        head first, stops at the first page whose last score is past the
        oldest update_time seen: usually the first page, since a queue's
        first jobs are rarely requeued ones. A page is OLDEST_PAGE ids, four
        times more each round (O(log N) rounds at worst: every job at the
        front requeued). Exact while Redis' clock never steps back and no
        script queues more than 2000 jobs at once (else off by at most the
        step, or 1 µs per job over 2000).
        """
        best: dict[QueueKey, int] = {}
        start, size = 0, OLDEST_PAGE
        while queues:
            pages = await self._heads(queues, start, size)
            reads = [
                ["HGET", self._parts[queue[0]].keys.job(job_id), "update_time"]
                for queue, page in zip(queues, pages, strict=True)
                for job_id, _ in page
            ]
            stamps = iter(await self._connection.read_pipelined("queue_stats", reads))
            going: list[QueueKey] = []
            for queue, page in zip(queues, pages, strict=True):
                for stamp in (next(stamps) for _ in page):
                    if stamp:  # a record gone meanwhile is skipped
                        best[queue] = min(best.get(queue, int(stamp)), int(stamp))
                full = len(page) == size
                floor_ms = (page[-1][1] - SCORE_AHEAD_US) // 1000 if page else 0
                if full and (queue not in best or floor_ms < best[queue]):
                    going.append(queue)
            queues, start, size = going, start + size, size * 4
        oldest: dict[StatsKey, int] = {}
        for (_, model, priority, pool), stamp in best.items():
            key = (model, priority, pool)
            oldest[key] = min(oldest.get(key, stamp), stamp)
        return oldest

    async def _heads(
        self, queues: list[QueueKey], start: int, size: int
    ) -> list[list[tuple[str, float]]]:
        """Ids and scores start..start+size-1 of each queue (one pipeline)."""
        last = start + size - 1
        commands: list[list[ArgValue]] = [
            [
                "ZRANGE",
                self._parts[index].keys.queue(model, priority, pool),
                start,
                last,
                "WITHSCORES",
            ]
            for index, model, priority, pool in queues
        ]
        replies = await self._connection.read_pipelined("queue_stats", commands)
        return [_pairs(reply) for reply in replies]


def _stats(
    sizes: dict[QueueKey, int],
    processing: dict[StatsKey, int],
    oldest: dict[StatsKey, int],
) -> list[QueueStats]:
    queued: dict[StatsKey, int] = {}
    for (_, model, priority, pool), size in sizes.items():
        key = (model, priority, pool)
        queued[key] = queued.get(key, 0) + size
    keys = {key for key, count in queued.items() if count} | set(processing)
    order = {priority: rank for rank, priority in enumerate(PRIORITIES_IN_CLAIM_ORDER)}
    return [
        QueueStats(
            model=model,
            priority=priority,
            pool=pool,
            queued=queued.get((model, priority, pool), 0),
            processing=processing.get((model, priority, pool), 0),
            oldest_queued_time=ms_to_datetime(oldest[(model, priority, pool)])
            if (model, priority, pool) in oldest
            else None,
        )
        for model, priority, pool in sorted(keys, key=lambda k: (k[0], order[k[1]], k[2]))
    ]
