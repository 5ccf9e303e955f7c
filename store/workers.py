"""The worker registry's rules, the same in every store (ListWorkers: DESIGN "Operators").

A worker-server writes what it saw (`WorkerSighting`s, batched: at most one
write per worker per second, worker_server/registry.py). The store keeps one
entry per worker: its pool, its models and when it was last seen, by the
store's clock; an entry is forgotten `retention()` after its worker was last
seen, so the registry never grows past the workers of the last minutes.

ListWorkers shows every worker seen in the last LISTED_FOR or holding a live
lease (`listed`). The jobs a worker holds come from the live leases, never
from the registry (a worker listed as idle while it runs a job, or as busy
after its job moved on, is the failure this avoids). A live lease also counts
as a sighting at its last claim or heartbeat (its deadline less
lease_timeout), so a worker on one long job stays listed even when a
registry write was lost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from store.model import StoreSettings, WorkerInfo

#: A worker with no live lease is listed this long after it was last seen.
LISTED_FOR = timedelta(seconds=120)
#: Room for the registry's flush delay and clock steps, past LISTED_FOR or a lease.
RETENTION_SLACK = timedelta(seconds=10)


def retention(settings: StoreSettings) -> timedelta:
    """How long an entry is kept after its worker was last seen.

    Past LISTED_FOR, and past a lease: a worker holding a live lease was
    seen (claimed or heartbeated) within lease_timeout, so its entry, with
    its pool and models, is still there while it is listed for the lease.
    """
    return max(LISTED_FOR, settings.lease_timeout) + RETENTION_SLACK


@dataclass(frozen=True)
class Held:
    """One lease as a store read it: its job, its worker, its deadline."""

    job_id: str
    worker_id: str
    deadline: datetime


def listed(
    registered: Iterable[WorkerInfo],
    held: Iterable[Held],
    now: datetime,
    lease_timeout: timedelta,
) -> list[WorkerInfo]:
    """ListWorkers' answer: most recently seen first (then by id), held jobs in id order.

    `registered` are the registry's entries as a store read them: a WorkerInfo
    each, without job_ids (those come from `held`, never from the registry)."""
    entries = {entry.worker_id: entry for entry in registered}
    jobs: dict[str, list[str]] = {}
    beats: dict[str, datetime] = {}
    for lease in held:
        if lease.deadline <= now or not lease.worker_id:
            continue  # expired (recovery will requeue it), or never claimed by a worker
        jobs.setdefault(lease.worker_id, []).append(lease.job_id)
        beat = min(lease.deadline - lease_timeout, now)
        beats[lease.worker_id] = max(beats.get(lease.worker_id, beat), beat)
    cutoff = now - LISTED_FOR
    workers: list[WorkerInfo] = []
    for worker_id in entries.keys() | jobs.keys():
        entry = entries.get(worker_id)
        times = [entry.last_seen_time] if entry else []
        if worker_id in beats:
            times.append(beats[worker_id])
        seen = max(times)
        if worker_id not in jobs and seen < cutoff:
            continue
        workers.append(
            WorkerInfo(
                worker_id=worker_id,
                pool=entry.pool if entry else "",
                models=entry.models if entry else (),
                last_seen_time=seen,
                job_ids=tuple(sorted(jobs.get(worker_id, ()))),
            )
        )
    return sorted(workers, key=lambda w: (-w.last_seen_time.timestamp(), w.worker_id))
