"""Prometheus metrics: DESIGN's names and labels, one registry per server process.

Counters and histograms are fed by what this process's own calls caused
(Submit, ClaimNext, SetResult, Cancel, and the transitions its recover()
calls return), so with many replicas each transition is counted exactly once
across them. Queue depth and in-flight gauges are read from the store at
scrape time by `StoreCollector`: the scrape runs in the HTTP server's thread,
so it hands the two store reads to the event loop with
`run_coroutine_threadsafe` and waits at most `scrape_timeout`.

`jobgate_jobs_submitted_total` and `jobgate_jobs_finished_total` count units
of work: single jobs and group children, not group parents (a parent is a
summary of its children).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from serving.fleet_gauges import FleetCollector, read_on_loop
from store.model import (
    ERROR_ATTEMPTS_EXHAUSTED,
    ERROR_LEASE_EXPIRED,
    TERMINAL_STATUSES,
    ClaimedJob,
    Job,
    JobEvent,
    JobKind,
    JobSpec,
    JobStatus,
    Priority,
)
from store.protocol import Store

log = logging.getLogger("jobgate.metrics")

QUEUE_WAIT_BUCKETS: tuple[float, ...] = (
    *(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    *(30, 60, 120, 300, 600, 1800, 3600),
)
DURATION_BUCKETS: tuple[float, ...] = (
    *(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    *(120, 300, 600, 1800, 3600, 7200),
)


def priority_label(priority: Priority) -> str:
    return priority.name.lower()


def status_label(status: JobStatus) -> str:
    return status.value  # the enum values are the lower-case names


class Metrics:
    """Every jobgate metric, registered on this instance's own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.jobs_submitted = Counter(
            "jobgate_jobs_submitted_total",
            "Jobs accepted (single jobs and group children; reused submits not counted).",
            ["tenant", "model", "priority"],
            registry=r,
        )
        self.jobs_finished = Counter(
            "jobgate_jobs_finished_total",
            "Jobs that reached a terminal status (single jobs and group children).",
            ["model", "priority", "status"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "jobgate_queue_wait_seconds",
            "Time from submit to first claim.",
            ["model", "priority"],
            buckets=QUEUE_WAIT_BUCKETS,
            registry=r,
        )
        self.job_duration = Histogram(
            "jobgate_job_duration_seconds",
            "Time from the last claim to the terminal status.",
            ["model", "status"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.leases_expired = Counter(
            "jobgate_leases_expired_total",
            "Leases that expired without a heartbeat (requeued or exhausted).",
            ["model"],
            registry=r,
        )
        self.jobs_retried = Counter(
            "jobgate_jobs_retried_total",
            "Jobs RetryJob put back to work (single jobs and group children).",
            ["model"],
            registry=r,
        )
        self.store_up = Gauge(
            "jobgate_store_up", "1 while the store answers its health probe.", registry=r
        )
        self.store_errors = Counter(
            "jobgate_store_errors_total",
            "Store calls that failed because the store was unreachable or broken.",
            ["operation"],
            registry=r,
        )
        self.grpc_started = Counter(
            "grpc_server_started_total",
            "RPCs started on the server.",
            ["grpc_type", "grpc_service", "grpc_method"],
            registry=r,
        )
        self.grpc_handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, by status code.",
            ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
            registry=r,
        )
        self.grpc_handling = Histogram(
            "grpc_server_handling_seconds",
            "Time from RPC start to its status.",
            ["grpc_type", "grpc_service", "grpc_method"],
            registry=r,
        )

    def watch_store(
        self, store: Store, loop: asyncio.AbstractEventLoop, pools: Sequence[str] = ()
    ) -> None:
        """Add the scrape-time collectors for `store`: queue depth, in flight, and
        jobgate_workers (a series for each of `pools`, the auth file's, 0 included)."""
        self.registry.register(StoreCollector(store, loop, self))
        self.registry.register(FleetCollector(store, loop, pools))

    def submitted(self, tenant: str, priority: Priority, specs: Sequence[JobSpec]) -> None:
        for spec in specs:
            self.jobs_submitted.labels(tenant, spec.model, priority_label(priority)).inc()

    def claimed(self, claimed: Iterable[ClaimedJob]) -> None:
        for item in claimed:
            job = item.job
            # Submit -> first claim; later attempts waited after a requeue whose
            # time the snapshot does not carry.
            if job.attempts == 1 and job.start_time is not None:
                wait = (job.start_time - job.create_time).total_seconds()
                self.queue_wait.labels(job.model, priority_label(job.priority)).observe(
                    max(wait, 0.0)
                )

    def retried(self, jobs: Iterable[Job]) -> None:
        """Count the units of work (single jobs, group children) a RetryJob redid."""
        for job in jobs:
            self.jobs_retried.labels(job.model).inc()

    def finished(self, job: Job) -> None:
        """Count `job`, which this process's call just made terminal."""
        if job.kind is JobKind.GROUP or not job.terminal:
            return
        self._count_finished(job.model, job.priority, job.status)
        if job.start_time is not None and job.end_time is not None:
            duration = (job.end_time - job.start_time).total_seconds()
            self.job_duration.labels(job.model, status_label(job.status)).observe(
                max(duration, 0.0)
            )

    def recovered(self, events: Iterable[JobEvent]) -> None:
        """Count the transitions a recover() call of this process made."""
        events = list(events)
        # A parent only moves in the same atomic step as one of its children,
        # so its event comes in the same batch as the child's, which names it.
        # (Parents carry their first child's model, so the model cannot tell.)
        parents = {event.parent_job_id for event in events if event.parent_job_id}
        for event in events:
            if event.job_id in parents:  # counted through its children
                continue
            if event.to_status in TERMINAL_STATUSES:
                self._count_finished(event.model, event.priority, event.to_status)
            if event.from_status is JobStatus.PROCESSING and event.error_code in (
                ERROR_LEASE_EXPIRED,
                ERROR_ATTEMPTS_EXHAUSTED,
            ):
                self.leases_expired.labels(event.model).inc()

    def _count_finished(self, model: str, priority: Priority, status: JobStatus) -> None:
        self.jobs_finished.labels(model, priority_label(priority), status_label(status)).inc()

    def store_failed(self, operation: str) -> None:
        self.store_errors.labels(operation).inc()


class StoreCollector:
    """jobgate_queue_depth, jobgate_pool_queue_depth and jobgate_jobs_in_flight,
    read from the store per scrape."""

    def __init__(
        self,
        store: Store,
        loop: asyncio.AbstractEventLoop,
        metrics: Metrics,
        scrape_timeout: float = 2.0,
    ) -> None:
        self._store = store
        self._loop = loop
        self._metrics = metrics
        self._timeout = scrape_timeout

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        depth, pool_depth, in_flight = self._families()
        try:
            ready, flights = self._read()
        except Exception as error:  # the scrape must still answer, without these
            log.warning("scrape could not read the store: %s", error or type(error).__name__)
            self._metrics.store_failed("scrape")
        else:
            by_priority: dict[tuple[str, Priority], int] = {}
            by_pool: dict[tuple[str, str], int] = {}
            for (model, priority, pool), count in ready.items():
                by_priority[(model, priority)] = by_priority.get((model, priority), 0) + count
                by_pool[(model, pool)] = by_pool.get((model, pool), 0) + count
            for (model, priority), count in sorted(by_priority.items()):
                depth.add_metric([model, priority_label(priority)], count)
            for (model, pool), count in sorted(by_pool.items()):
                pool_depth.add_metric([model, pool], count)
            for model, count in sorted(flights.items()):
                in_flight.add_metric([model], count)
        yield depth
        yield pool_depth
        yield in_flight

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "jobgate_queue_depth",
                "Claimable (QUEUED) jobs per model and priority, read at scrape time.",
                labels=["model", "priority"],
            ),
            GaugeMetricFamily(
                "jobgate_pool_queue_depth",
                'Claimable (QUEUED) jobs per model and the pool they are bound to ("" for any'
                " pool), read at scrape time.",
                labels=["model", "pool"],
            ),
            GaugeMetricFamily(
                "jobgate_jobs_in_flight",
                "PROCESSING jobs (live leases) per model, read at scrape time.",
                labels=["model"],
            ),
        )

    def _read(self) -> tuple[dict[tuple[str, Priority, str], int], dict[str, int]]:
        return read_on_loop(self._loop, self._read_async, self._timeout)

    async def _read_async(self) -> tuple[dict[tuple[str, Priority, str], int], dict[str, int]]:
        return await self._store.ready_counts(), await self._store.in_flight()


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample's value; call it off the event loop thread (the collector blocks)."""
    value: float | None = metrics.registry.get_sample_value(name, labels or {})
    return value
