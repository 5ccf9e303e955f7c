"""Who calls this worker-server: noted in memory per call, written to the store in batches.

Every WorkerService call notes its worker here (ClaimNext and ReportAndClaim
with the pool and models it serves; Heartbeat and SetResult through the
lease's worker, which the store's answer names). Nothing is written per
call: a flush writes every worker noted since the last one in one
`Store.record_workers` call (one round trip), and flushes are at least
FLUSH_INTERVAL apart, so a worker costs at most one registry write per
FLUSH_INTERVAL on each worker-server however often it calls. A flush is
scheduled by the first note after an idle spell (and runs at once if the
last flush is older than the interval), so an idle worker-server runs no
timer. An entry not noted for LISTED_FOR is dropped from memory: the
registry holds the workers of the last two minutes, no more.

A failed write keeps its entries for the flush the next call schedules
(store trouble is counted in jobgate_store_errors_total{operation=
"record_workers"}); the registry is an operator's view, so a lost write
costs only staleness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from store.errors import StoreError
from store.model import WorkerSighting
from store.protocol import Store
from store.workers import LISTED_FOR

log = logging.getLogger("jobgate.worker_server")

#: At most one registry write per worker per this many seconds, per worker-server.
FLUSH_INTERVAL = 1.0

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


@dataclass
class _Noted:
    at: float  # the clock when last noted
    pool: str | None = None  # stated since the last flush (None: only touched)
    models: tuple[str, ...] = ()
    dirty: bool = True


class WorkerRegistry:
    """The workers this worker-server saw, written to `store` in batches (module docstring)."""

    def __init__(
        self,
        store: Store,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        interval: float = FLUSH_INTERVAL,
    ) -> None:
        self._store = store
        self._clock = clock
        self._sleep = sleep
        self._interval = interval
        self._noted: dict[str, _Noted] = {}
        self._last_flush: float | None = None
        self._flusher: asyncio.Task[None] | None = None
        self.flushes = 0  # writes made (tests, debugging)

    def __len__(self) -> int:
        return len(self._noted)

    @property
    def pending(self) -> int:
        """Workers noted since the last write (tests, debugging)."""
        return sum(entry.dirty for entry in self._noted.values())

    def saw(self, worker_id: str, pool: str, models: Sequence[str]) -> None:
        """A call that says what the worker serves (ClaimNext, ReportAndClaim)."""
        entry = self._note(worker_id)
        entry.pool, entry.models = pool, tuple(dict.fromkeys(models))

    def touched(self, worker_id: str) -> None:
        """A call on one of the worker's leases (Heartbeat, SetResult): it is alive."""
        if worker_id:
            self._note(worker_id)

    def _note(self, worker_id: str) -> _Noted:
        now = self._clock()
        entry = self._noted.get(worker_id)
        if entry is None:
            entry = self._noted[worker_id] = _Noted(now)
        entry.at, entry.dirty = now, True
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_soon(), name="jobgate-worker-registry")
        return entry

    async def _flush_soon(self) -> None:
        try:
            while any(entry.dirty for entry in self._noted.values()):
                if self._last_flush is not None:
                    delay = self._last_flush + self._interval - self._clock()
                    if delay > 0:
                        await self._sleep(delay)
                if not await self.flush():
                    return  # the store failed: the next note schedules a retry
        finally:
            self._flusher = None

    async def flush(self) -> bool:
        """Write every worker noted since the last flush (one store call), forget the silent.

        False if the store failed (the batch is kept for the next flush).
        """
        now = self._clock()
        self._last_flush = now
        batch = [
            WorkerSighting(worker_id, timedelta(seconds=max(now - e.at, 0.0)), e.pool, e.models)
            for worker_id, e in self._noted.items()
            if e.dirty
        ]
        for entry in self._noted.values():
            entry.dirty = False
        forget = now - LISTED_FOR.total_seconds()
        self._noted = {w: e for w, e in self._noted.items() if e.at >= forget}
        if not batch:
            return True
        self.flushes += 1
        try:
            await self._store.record_workers(batch)
        except StoreError as error:
            log.debug("worker registry not written (kept for the next flush): %s", error)
            for kept in self._entries(batch):  # written by the next flush
                kept.dirty = True
            return False
        for written in self._entries(batch):
            if not written.dirty:
                written.pool = None  # stated and written: a later touch keeps it in the store
        return True

    def _entries(self, batch: Sequence[WorkerSighting]) -> list[_Noted]:
        found = (self._noted.get(sighting.worker_id) for sighting in batch)
        return [entry for entry in found if entry is not None]

    async def close(self) -> None:
        """Stop a pending flush (what it would write is lost; the registry is a view)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
