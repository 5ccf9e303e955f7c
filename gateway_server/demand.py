"""One watcher per KEDA trigger, shared by every StreamIsActive call of that trigger.

A trigger is (model, pool). Its `DemandWatch` reads `Store.demand` once, then
again only when the store's notifications say the demand may have moved,
and tells every stream of the trigger when it turns between zero and
non-zero. Open streams cost nothing per stream: 500 streams of 5 triggers
are 5 watchers.

What wakes a watcher (`Store.listen_model`):
- while the demand is zero, only its model's own topics: a job became
  claimable ("r", the first Submit to an idle model) or its queue shrank
  ("q"). Nothing else can make it non-zero, so an idle trigger costs no read
  however busy other models are;
- while it is non-zero, every change too: a running job that ends publishes
  only its id, and the last one ending is what turns the demand to zero.

Bounds: a read after a wake-up comes at least READ_GAP after the previous
one (a burst of changes is one read), and the first wake-up after a quiet
spell is read at once, so the first Submit to an idle model is told in one
read; a change is answered within READ_GAP plus one read at worst. The one
read made on switching topics (the state flipped) is not paced, so a
trigger flapping between zero and non-zero costs at most two reads per
READ_GAP. Without any wake-up a watcher reads again after RECHECK (a
notification lost while a subscription was down is followed by a wake-up
of every listener anyway). While nothing changes, a trigger costs one read
per RECHECK, whatever the number of its streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

from store.errors import StoreError
from store.protocol import Store

log = logging.getLogger("jobgate.gateway")

#: A watcher reads the demand at most once per this many seconds.
READ_GAP = 0.5
#: Without a wake-up, a watcher reads again after this many seconds.
RECHECK = 15.0


@dataclass(frozen=True)
class Trigger:
    """What a ScaledObject's trigger asks about: a model, and a pool (None: any)."""

    model: str
    pool: str | None


class DemandWatch:
    """The demand of one trigger, kept current for its streams (module docstring)."""

    def __init__(self, store: Store, trigger: Trigger, gap: float, recheck: float) -> None:
        self._store = store
        self.trigger = trigger
        self._gap = gap
        self._recheck = recheck
        #: None until the first read.
        self.active: bool | None = None
        #: Set when a read failed: the watcher stopped, its streams end with it.
        self.error: StoreError | None = None
        self.streams = 0
        self.reads = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"jobgate-keda-{self.trigger.model}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def states(self) -> AsyncIterator[bool]:
        """The current state once known, then each change between zero and non-zero."""
        sent: bool | None = None
        while True:
            changed = self._changed
            if self.error is not None:
                raise self.error
            if self.active is not None and self.active != sent:
                sent = self.active
                yield sent
                continue
            await changed.wait()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        model, pool = self.trigger.model, self.trigger.pool
        last_woken = -math.inf  # when the last read after a wake-up was made
        every_change = False
        try:
            while True:
                with self._store.listen_model(model, every_change) as listener:
                    woken = False  # the first read under new topics is never paced
                    while True:
                        pause = last_woken + self._gap - loop.time()
                        if woken and pause > 0:
                            await asyncio.sleep(pause)  # pacing: a burst is one read
                        listener.clear()  # before the read: a change after it wakes us
                        if woken:
                            last_woken = loop.time()
                        demand = await self._store.demand(model, pool)
                        self.reads += 1
                        self._publish(demand > 0)
                        if (demand > 0) != every_change:
                            break  # listen to what can change it from here
                        await listener.wait(self._recheck)
                        woken = True
                every_change = not every_change
        except StoreError as error:
            log.warning("KEDA trigger %s: the store failed: %s", self.trigger, error)
            self.error = error
            self._wake()

    def _publish(self, active: bool) -> None:
        if active != self.active:
            self.active = active
            self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class DemandWatches:
    """The watchers of one gateway, by trigger; a watcher lives while it has streams."""

    def __init__(self, store: Store, gap: float = READ_GAP, recheck: float = RECHECK) -> None:
        self._store = store
        self._gap = gap
        self._recheck = recheck
        self._watches: dict[Trigger, DemandWatch] = {}

    def __len__(self) -> int:
        return len(self._watches)

    @property
    def reads(self) -> int:
        """Reads made by the watchers alive now (tests, debugging)."""
        return sum(watch.reads for watch in self._watches.values())

    @contextlib.asynccontextmanager
    async def watching(self, trigger: Trigger) -> AsyncIterator[DemandWatch]:
        watch = self._watches.get(trigger)
        if watch is None or watch.error is not None:  # a failed one is replaced
            watch = self._watches[trigger] = DemandWatch(
                self._store, trigger, self._gap, self._recheck
            )
            watch.start()
        watch.streams += 1
        try:
            yield watch
        finally:
            watch.streams -= 1
            if watch.streams == 0:
                if self._watches.get(trigger) is watch:
                    del self._watches[trigger]
                await watch.stop()
