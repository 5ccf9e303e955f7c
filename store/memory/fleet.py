"""LocalEngine's fleet reads and its worker registry (ListWorkers, ListQueues, KEDA).

The registry is a dict by worker id, trimmed on every write to the entries
seen within `store.workers.retention()`: at most the workers of the last
minutes. Live leases are read off the records (O(jobs) per ListWorkers on
the embedded store, an operator's call). `queue_stats` and `demand` count per
(model, priority, pool).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from store import policy, workers
from store.memory.record import Record
from store.memory.state import State, dt
from store.model import (
    PRIORITIES_IN_CLAIM_ORDER,
    JobKind,
    JobStatus,
    Priority,
    QueueStats,
    WorkerInfo,
    WorkerSighting,
)


class LocalFleet:
    """The registry entries and the fleet reads over one LocalEngine's state."""

    def __init__(self, state: State, check_open: Callable[[], None]) -> None:
        self._state = state
        self._check_open = check_open
        # worker id -> (pool, models, last seen: epoch seconds)
        self._seen: dict[str, tuple[str, tuple[str, ...], float]] = {}

    def rebind(self, state: State) -> None:
        """The engine's state was rebuilt (a durable store reloaded its file)."""
        self._state = state

    def record(self, sightings: Sequence[WorkerSighting]) -> None:
        self._check_open()
        now = self._state.clock()
        for sighting in sightings:
            seen = now - sighting.age.total_seconds()
            pool, models, last = self._seen.get(sighting.worker_id, ("", (), seen))
            if sighting.pool is not None:  # the latest stated pool and models win
                pool, models = sighting.pool, sighting.models
            self._seen[sighting.worker_id] = (pool, models, max(seen, last))
        keep = now - workers.retention(self._state.settings).total_seconds()
        for worker_id in [w for w, (_, _, last) in self._seen.items() if last < keep]:
            del self._seen[worker_id]

    def workers(self) -> list[WorkerInfo]:
        self._check_open()
        registered = (
            WorkerInfo(worker_id, pool, models, dt(last))
            for worker_id, (pool, models, last) in self._seen.items()
        )
        held = (
            workers.Held(record.id, record.worker_id, dt(record.lease_deadline))
            for record in self._processing()
        )
        lease_timeout = self._state.settings.lease_timeout
        return workers.listed(registered, held, dt(self._state.clock()), lease_timeout)

    def queue_stats(self) -> list[QueueStats]:
        """One entry per (model, priority, pool) with queued or processing jobs.

        Queued means claimable (a job waiting out a retry backoff is not). One
        pass over the records, O(jobs): the oldest QUEUED time is exact (the
        least update_time, stamped when a job became QUEUED) whatever the
        queue order (under fair share it is not age order).
        """
        self._check_open()
        counts: dict[tuple[str, Priority, str], list[int]] = {}
        oldest: dict[tuple[str, Priority, str], float] = {}
        queues = self._state.queues
        for record in self._state.jobs.values():
            if record.kind is JobKind.GROUP:
                continue
            key = (record.model, record.priority, record.pool)
            if record.status is JobStatus.PROCESSING:
                counts.setdefault(key, [0, 0])[1] += 1
            elif record.status is JobStatus.QUEUED:
                queue = queues.get(key)
                if queue is not None and queue.is_visible(record.id):
                    counts.setdefault(key, [0, 0])[0] += 1
                    oldest[key] = min(oldest.get(key, record.update_time), record.update_time)
        return [
            QueueStats(
                model=key[0],
                priority=key[1],
                pool=key[2],
                queued=queued,
                processing=processing,
                oldest_queued_time=dt(oldest[key]) if key in oldest else None,
            )
            for key, (queued, processing) in sorted(counts.items(), key=_claim_order)
        ]

    def demand(self, model: str, pool: str | None) -> int:
        """QUEUED (claimable) + PROCESSING jobs of `model` that workers of `pool` could
        take (bound to it or to any pool; every job of the model when pool is None):
        KEDA's metric. O(queue classes x priorities)."""
        self._check_open()
        state = self._state
        pools = {key[2] for key in state.queues if key[0] == model}
        pools |= {
            policy.class_parts(c)[1] for c in state.in_flight if policy.class_parts(c)[0] == model
        }
        wanted = pools if pool is None else {pool, ""} & (pools | {pool, ""})
        queued = sum(
            len(state.queues.get((model, p, each), ()))
            for p in PRIORITIES_IN_CLAIM_ORDER
            for each in wanted
        )
        running = sum(state.in_flight.get(policy.queue_class(model, each), 0) for each in wanted)
        return queued + running

    def _processing(self) -> Iterator[Record]:
        for record in self._state.jobs.values():
            if record.status is JobStatus.PROCESSING and record.kind is not JobKind.GROUP:
                yield record


def _claim_order(item: tuple[tuple[str, Priority, str], list[int]]) -> tuple[str, int, str]:
    (model, priority, pool), _ = item
    return model, PRIORITIES_IN_CLAIM_ORDER.index(priority), pool
