"""Deadlines in memory: one min-heap per kind (leases, run timeouts, retries, queue
timeouts, expiries), acted on only while the record still matches the entry."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from store.memory.record import Record
from store.model import JobStatus

Current = Callable[["Record", float, str], bool]


class Deadlines:
    """One kind of deadline in a min-heap of (deadline, job id, token).

    Entries are never removed when a transition makes them stale; `due`
    skips them, and `push` sweeps them out once they outnumber the live jobs
    twice over, so memory stays proportional to live jobs.
    """

    def __init__(self, is_current: Current) -> None:
        self._heap: list[tuple[float, str, str]] = []
        self._is_current = is_current

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, deadline: float, job_id: str, token: str = "") -> None:
        heapq.heappush(self._heap, (deadline, job_id, token))

    def fill(self, entries: list[tuple[float, str, str]]) -> None:
        """Add many (deadline, job id, token) entries at once (a restart): one heapify, O(n)."""
        self._heap.extend(entries)
        heapq.heapify(self._heap)

    def sweep(self, jobs: dict[str, Record], live: int) -> None:
        if len(self._heap) <= 2 * live + 1024:
            return
        self._heap = [entry for entry in self._heap if self._current(jobs, entry)]
        heapq.heapify(self._heap)

    def due(self, now: float, jobs: dict[str, Record]) -> Iterator[Record]:
        """Pop every entry due by `now`; yield the records each still applies to."""
        while self._heap and self._heap[0][0] <= now:
            entry = heapq.heappop(self._heap)
            if self._current(jobs, entry):
                yield jobs[entry[1]]

    def _current(self, jobs: dict[str, Record], entry: tuple[float, str, str]) -> bool:
        record = jobs.get(entry[1])
        return record is not None and self._is_current(record, entry[0], entry[2])


def lease_is_current(record: Record, deadline: float, lease_id: str) -> bool:
    return (
        record.status is JobStatus.PROCESSING
        and record.lease_id == lease_id
        and record.lease_deadline == deadline
    )


def run_is_current(record: Record, deadline: float, lease_id: str) -> bool:
    return record.status is JobStatus.PROCESSING and record.lease_id == lease_id


def retry_is_current(record: Record, ready_at: float, _: str) -> bool:
    return record.status is JobStatus.QUEUED and record.ready_at == ready_at


def queue_wait_is_current(record: Record, deadline: float, _: str) -> bool:
    return record.status is JobStatus.QUEUED and record.queue_deadline == deadline


def expiry_is_current(record: Record, expire_at: float, _: str) -> bool:
    return record.expire_at == expire_at
