"""jobgate_workers{pool}, read from the store per scrape.

jobgate_workers has a series for every pool the auth file names, every pool
with queued jobs and every pool a listed worker serves, 0 included: an empty
pool is a 0, not an absent series, so "a pool has queued jobs and no worker"
is an alert on present series (deploy/prometheus/alerts.yml). A worker is
counted as ListWorkers lists it (seen in the last 120 s, or holding a live
lease); one whose pool is unknown (known only by a lease) is left out.

The pools with queued jobs come from `Store.ready_counts()` (the read that
jobgate_pool_queue_depth is made of, in serving/metrics.py). Like the queue
gauges, it is read on the event loop from the scrape
thread, at most `scrape_timeout` long; a failed read answers the scrape
without them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric

from store.protocol import Store

log = logging.getLogger("jobgate.metrics")

Counts = dict[str, int]
T = TypeVar("T")


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "jobgate_workers",
        "Workers seen in the last 120 s (or holding a lease) per pool, read at scrape time.",
        labels=["pool"],
    )


class FleetCollector:
    """The fleet gauge (module docstring)."""

    def __init__(
        self,
        store: Store,
        loop: asyncio.AbstractEventLoop,
        pools: Sequence[str],
        scrape_timeout: float = 2.0,
    ) -> None:
        self._store = store
        self._loop = loop
        self._pools = tuple(pools)
        self._timeout = scrape_timeout

    def describe(self) -> Iterator[Metric]:
        yield _family()

    def collect(self) -> Iterator[Metric]:
        workers = _family()
        try:
            per_pool = self._read()
        except Exception as error:  # the scrape must still answer, without it
            log.warning("scrape could not read the fleet: %s", error or type(error).__name__)
        else:
            for pool, count in sorted(per_pool.items()):
                workers.add_metric([pool], count)
        yield workers

    def _read(self) -> Counts:
        return read_on_loop(self._loop, self.counts, self._timeout)

    async def counts(self) -> Counts:
        """Workers per pool (0 for a named pool or one with queued jobs)."""
        per_pool = dict.fromkeys(self._pools, 0)
        for (_, _, pool), queued in (await self._store.ready_counts()).items():
            if queued and pool:
                per_pool.setdefault(pool, 0)
        for worker in await self._store.list_workers():
            if worker.pool:
                per_pool[worker.pool] = per_pool.get(worker.pool, 0) + 1
        return per_pool


def read_on_loop(
    loop: asyncio.AbstractEventLoop, read: Callable[[], Coroutine[Any, Any, T]], timeout: float
) -> T:
    """`read()` run on the server's event loop from the scrape's thread, awaited at most
    `timeout` (the store gauges' reads in serving/metrics.py, and this module's)."""
    if loop.is_closed():
        raise RuntimeError("the server's event loop is closed")
    if _on_loop(loop):  # blocking here would deadlock the loop that must read
        raise RuntimeError("scrape the registry from another thread")
    future = asyncio.run_coroutine_threadsafe(read(), loop)
    try:
        return future.result(timeout)
    finally:
        future.cancel()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
