"""Recovery, and the store health probe: the background tasks of a server process.

Recovery runs in every server process (serve, gateway and worker-server):
the store's leadership lease lets one replica at a time call recover(), and
recover() itself is safe if two run. Every ~0.3 s (with jitter) a process
renews or tries to take the leadership; the leader then handles whatever
fell due (expired leases, due retries, queue and run timeouts), so such
transitions happen within about a second, and within the leadership TTL
(1.5 s) after a leader dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import socket
import time
import uuid
from datetime import timedelta

from serving.lifecycle import HealthBoard
from serving.logs import event_fields
from serving.metrics import Metrics
from store.errors import StoreError
from store.protocol import Store

log = logging.getLogger("jobgate.recovery")
probe_log = logging.getLogger("jobgate.store")

RECOVERY_INTERVAL = 0.3
LEADERSHIP_TTL = timedelta(seconds=1.5)
PROBE_INTERVAL = 1.0
PROBE_TIMEOUT = 1.0


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class Recovery:
    """The recovery loop: leadership, then recover(), logging each transition."""

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        holder: str | None = None,
        interval: float = RECOVERY_INTERVAL,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self.holder = holder or holder_name()
        self._interval = interval
        self._leader = False
        self._lease_until = -math.inf  # time.monotonic() when our leadership surely ends
        self.term = 0  # changes when another replica may have led since we last did
        self._failing = False

    def leading(self) -> bool:
        """Whether this process surely holds the leadership now.

        Counted from before the acquire call, so it ends before the store's
        lease does: another replica cannot lead while this says True. A
        failing store leaves it to run out.
        """
        return time.monotonic() < self._lease_until

    def leadership(self) -> int | None:
        """The leadership term while `leading()`, else None (see docs/servers.md, Audit log)."""
        return self.term if self.leading() else None

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.step()
            await _pause(stop, self._interval * random.uniform(0.7, 1.3))

    async def step(self) -> None:
        """One round; never raises (a broken store is logged once per outage)."""
        try:
            asked = time.monotonic()
            leader = await self._store.acquire_leadership(self.holder, LEADERSHIP_TTL)
            self._note_lease(asked, leader)
            self._note_leadership(leader)
            if leader:
                events = await self._store.recover()
                self._metrics.recovered(events)
                for event in events:
                    log.info("recovered", extra=event_fields(event))
        except StoreError as error:
            if not self._failing:
                log.warning("recovery paused: %s", error)
            self._failing = True
            return
        except Exception:
            log.exception("recovery step failed")
            return
        if self._failing:
            log.info("recovery resumed")
        self._failing = False

    def _note_lease(self, asked: float, leader: bool) -> None:
        ttl = LEADERSHIP_TTL.total_seconds()
        if not leader:
            self._lease_until = -math.inf
            return
        # Another replica can have led since our last lease only if that lease
        # ran out and then its own (at least `ttl` long) did too.
        if time.monotonic() >= self._lease_until + ttl:
            self.term += 1
        self._lease_until = asked + ttl

    def _note_leadership(self, leader: bool) -> None:
        if leader != self._leader:
            log.info(
                "recovery leadership %s",
                "taken" if leader else "lost",
                extra={"holder": self.holder},
            )
        self._leader = leader


class StoreProbe:
    """Pings the store every second; sets jobgate_store_up and the health status."""

    def __init__(self, store: Store, metrics: Metrics, health: HealthBoard) -> None:
        self._store = store
        self._metrics = metrics
        self._health = health
        self.up: bool | None = None

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.step()
            await _pause(stop, PROBE_INTERVAL)

    async def step(self) -> None:
        try:
            await asyncio.wait_for(self._store.ping(), PROBE_TIMEOUT)
            up = True
        except (StoreError, TimeoutError) as error:
            up = False
            reason = str(error) or type(error).__name__
        except Exception:
            probe_log.exception("store probe failed")
            up, reason = False, "probe error"
        if up != self.up:
            if up:
                probe_log.info("store reachable")
            else:
                probe_log.warning("store unreachable: %s", reason)
            self._metrics.store_up.set(1 if up else 0)
            await self._health.set_serving(up)
        self.up = up
