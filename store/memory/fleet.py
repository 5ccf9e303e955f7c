"""LocalEngine's fleet reads and its worker registry (ListWorkers, ListQueues, KEDA).

The registry is a dict by worker id, trimmed on every write to the entries
seen within `store.workers.retention()`: at most the workers of the last
minutes. Live leases are read off the records (O(jobs) per ListWorkers on
the embedded store, an operator's call). `queue_stats` and `demand` are the
simple bodies over today's (model, priority) queues, every job counted as
pool "" (the placement work replaces them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from store import workers
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
            workers.Registered(worker_id, pool, models, dt(last))
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

        # pools: the lead replaces this body. Every job counts under pool "";
        # queued means claimable (a job waiting out a retry backoff is not);
        # one pass over every record, O(jobs): the oldest QUEUED time is
        # exact (min update_time, stamped when the job became QUEUED).
        """
        self._check_open()
        counts: dict[tuple[str, Priority], list[int]] = {}
        oldest: dict[tuple[str, Priority], float] = {}
        queues = self._state.queues
        for record in self._state.jobs.values():
            if record.kind is JobKind.GROUP:
                continue
            key = (record.model, record.priority)
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
                pool="",
                queued=queued,
                processing=processing,
                oldest_queued_time=dt(oldest[key]) if key in oldest else None,
            )
            for key, (queued, processing) in sorted(counts.items(), key=_claim_order)
        ]

    def demand(self, model: str, pool: str | None) -> int:
        """QUEUED (claimable) + PROCESSING jobs of `model`: KEDA's metric. O(priorities).

        # pools: the lead replaces this body. Every job counts as bound to
        # any pool, so every pool's workers could take it: `pool` changes nothing.
        """
        self._check_open()
        state = self._state
        queued = sum(len(state.queues.get((model, p), ())) for p in PRIORITIES_IN_CLAIM_ORDER)
        return queued + state.in_flight.get(model, 0)

    def _processing(self) -> Iterator[Record]:
        for record in self._state.jobs.values():
            if record.status is JobStatus.PROCESSING and record.kind is not JobKind.GROUP:
                yield record


def _claim_order(item: tuple[tuple[str, Priority], list[int]]) -> tuple[str, int]:
    (model, priority), _ = item
    return model, PRIORITIES_IN_CLAIM_ORDER.index(priority)
