"""The audit log: every job transition as one `job transition` log line.

The store writes each transition to its audit stream, whoever caused it (a
call, recover(), or a side effect such as a group child released when a
sibling ends). The replica that holds the recovery leadership tails that
stream and logs each event, so a transition is logged once across replicas.
On gaining the leadership it starts from the newest event: a hand-over may
skip or repeat the events of that moment (see docs/servers.md, "Audit log").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from jobgate._race import unless_set
from serving.logs import event_fields
from store.errors import StoreError
from store.model import JobEvent
from store.protocol import Store

log = logging.getLogger("jobgate.audit")

MESSAGE = "job transition"
BATCH = 100
BLOCK = timedelta(seconds=0.5)
IDLE_INTERVAL = 0.1  # how often a non-leader looks whether it leads now
BACKOFF_FIRST = 0.2
BACKOFF_MAX = 2.0

T = TypeVar("T")


def transition_fields(event: JobEvent) -> dict[str, object]:
    """The event's fields; `event_time` because `time` is the log line's own."""
    fields = event_fields(event)
    fields["priority"] = event.priority.name.lower()
    fields["event_time"] = event.time.isoformat()
    fields["event_id"] = event.id
    return fields


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class AuditLog:
    """Tails the audit stream while `leadership()` gives a term (this replica leads).

    The cursor survives a short lapse of the same term (nobody else can have
    logged meanwhile); a new term starts again from the newest event.
    """

    def __init__(
        self, store: Store, leadership: Callable[[], int | None], block: timedelta = BLOCK
    ) -> None:
        self._store = store
        self._leadership = leadership
        self._block = block
        self._term: int | None = None
        self.cursor: str | None = None  # None: the newest event is not found yet
        self._failing = False
        self._backoff = BACKOFF_FIRST

    @property
    def following(self) -> bool:
        """Whether this replica leads and logs each new event."""
        return self.cursor is not None and self._leadership() == self._term

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            term = self._leadership()
            if term is None:
                await _pause(stop, IDLE_INTERVAL)
                continue
            if term != self._term:
                self._term, self.cursor = term, None
            if not await self._step(stop, term):
                await _pause(stop, self._backoff)
                self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    async def _step(self, stop: asyncio.Event, term: int) -> bool:
        """Read and log one batch; False when the store failed (logged once per outage)."""
        try:
            if self.cursor is None:
                self.cursor = await self._store.newest_event_id()
                log.info("audit log following", extra={"after": self.cursor})
            read = self._store.events(after=self.cursor, count=BATCH, block=self._block)
            finished, events = await unless_set(stop, read)
        except StoreError as error:
            if not self._failing:
                log.warning("audit log paused: %s", error)
            self._failing = True
            return False
        except Exception:
            if not self._failing:
                log.exception("audit log read failed")
            self._failing = True
            return False
        if self._failing:
            log.info("audit log resumed")
        self._failing, self._backoff = False, BACKOFF_FIRST
        # A batch read across the end of our lease is not ours to log.
        if finished and events and self._leadership() == term:
            self._log(events)
        return True

    def _log(self, events: list[JobEvent]) -> None:
        for event in events:
            log.info(MESSAGE, extra=transition_fields(event))
            self.cursor = event.id
