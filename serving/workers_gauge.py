"""jobgate_workers{pool}: the workers of each pool, read from the store per scrape.

A series for every pool the auth file names, every pool with queued jobs and
every pool a listed worker serves, 0 included: an empty pool is a 0, not an
absent series, so "a pool has queued jobs and no worker" is an alert on two
present series (deploy/prometheus/alerts.yml). A worker is counted as
ListWorkers lists it (seen in the last 120 s, or holding a live lease); one
whose pool is unknown (known only by a lease) is left out. Like the queue
gauges, it is read on the event loop from the scrape thread, at most
`scrape_timeout` long; a failed read answers the scrape without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from store.protocol import Store

log = logging.getLogger("jobgate.metrics")


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "jobgate_workers",
        "Workers seen in the last 120 s (or holding a lease) per pool, read at scrape time.",
        labels=["pool"],
    )


class WorkersCollector:
    """The jobgate_workers gauge (module docstring)."""

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
        family = _family()
        try:
            counts = self._read()
        except Exception as error:  # the scrape must still answer, without this gauge
            log.warning("scrape could not count workers: %s", error or type(error).__name__)
        else:
            for pool, count in sorted(counts.items()):
                family.add_metric([pool], count)
        yield family

    def _read(self) -> dict[str, int]:
        if self._loop.is_closed():
            raise RuntimeError("the server's event loop is closed")
        if _on_loop(self._loop):  # blocking here would deadlock the loop that must read
            raise RuntimeError("scrape the registry from another thread")
        future = asyncio.run_coroutine_threadsafe(self.counts(), self._loop)
        try:
            return future.result(self._timeout)
        finally:
            future.cancel()

    async def counts(self) -> dict[str, int]:
        """Workers per pool, 0 for a named pool or one with queued jobs and none."""
        counts = dict.fromkeys(self._pools, 0)
        for stats in await self._store.queue_stats():
            if stats.queued and stats.pool:
                counts.setdefault(stats.pool, 0)
        for worker in await self._store.list_workers():
            if worker.pool:
                counts[worker.pool] = counts.get(worker.pool, 0) + 1
        return counts


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
