"""End-to-end figures: separate producer, servers and worker processes.

Throughput is jobs from the first Submit call's start to the last handler's
finish (read from the timing sink); CPU per process comes from /proc over
the same window; Redis commands per job from INFO commandstats deltas. A
prefilled drain's CPU and commands cover the prefill's end to its last
completion.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bench import servers
from bench.commandstats import commandstats, per_job
from bench.procstat import cpu_delta, cpu_seconds, cpu_snapshot
from bench.producer import payload
from bench.servers import Topology
from bench.sink import Completion, Sink
from jobgate import SyncJobClient

HANDLER = "bench.handlers:noop"
SEQUENTIAL, INFLIGHT, BATCH = "1 Submit at a time", "32 Submits in flight", "BatchSubmit of 100"


@dataclass(frozen=True)
class Sizes:
    """How much work each figure gets (full run vs quick mode)."""

    sequential_jobs: int
    inflight_jobs: int
    batch_jobs: int
    drain_jobs: int
    latency_rate: float
    latency_seconds: float


@dataclass
class Run:
    """One measured end-to-end run."""

    topology: str
    concurrency: int
    mode: str
    jobs: int = 0
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process
    commands: dict[str, float] | None = None  # Redis commands per job
    note: str = ""

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0

    def cpu_per_1000(self, process: str) -> float | None:
        return self.cpu[process] / self.jobs * 1000 if process in self.cpu else None


@dataclass(frozen=True)
class Window:
    """The CPU of some processes and the Redis commands from `start` on."""

    topology: Topology
    pids: Mapping[str, int]
    cpu: dict[str, float]
    stats: Counter[str] | None  # INFO commandstats at the start; None without Redis

    @classmethod
    def start(cls, topology: Topology, pids: Mapping[str, int]) -> Window:
        stats = commandstats(topology.redis) if topology.redis else None
        return cls(topology, pids, cpu_snapshot(pids), stats)

    def cpu_used(self) -> dict[str, float]:
        """CPU seconds by process since the start."""
        return cpu_delta(self.cpu, self.pids)

    def commands_per_job(self, jobs: int) -> dict[str, float] | None:
        """Redis commands per job since the start, or None without Redis."""
        if self.topology.redis is None or self.stats is None:
            return None
        return per_job(self.stats, commandstats(self.topology.redis), jobs)


@dataclass
class TopologyFigures:
    runs: list[Run] = field(default_factory=list)
    # worker concurrency -> (submit start -> handler start samples, Submits/s achieved)
    latency: dict[int, tuple[list[float], float]] = field(default_factory=dict)
    drains: list[Run] = field(default_factory=list)


def run_producer(target: str, model: str, jobs: int, **options: float) -> dict[str, Any]:
    """Run bench.producer in its own process and return its JSON answer."""
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    command = [sys.executable, "-m", "bench.producer", "--target", target, "--model", model,
               "--jobs", str(jobs), *flags]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"producer failed: {done.stderr[-2000:]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def completion_timeout(jobs: int) -> float:
    return max(60.0, jobs / 20)


@contextmanager
def ready_worker(
    topology: Topology, sink: Sink, model: str, concurrency: int
) -> Iterator[dict[str, int]]:
    """A worker process that has run one job; yields every pid to watch."""
    with servers.worker(topology.worker_target, model, HANDLER, concurrency, sink.env) as process:
        sink.clear()
        with SyncJobClient(topology.job_target) as client:
            client.submit(model, payload(64))
        sink.wait_for(1, 120)
        sink.clear()
        yield {**topology.pids, "worker": process.pid}


def measure(
    topology: Topology,
    sink: Sink,
    pids: Mapping[str, int],
    run: Run,
    model: str,
    jobs: int,
    **options: float,
) -> Run:
    """Fill `run` with one producer's figures (or the reason it could not run)."""
    sink.clear()
    window = Window.start(topology, pids)
    answer = run_producer(topology.job_target, model, jobs, **options)
    if "unavailable" in answer:
        run.note = answer["unavailable"]
        return run
    done = sink.wait_for(jobs, completion_timeout(jobs))
    run.cpu = {**window.cpu_used(), "producer": answer["cpu_seconds"]}
    run.commands = window.commands_per_job(jobs)
    run.jobs = jobs
    run.seconds = max(c.finished for c in done) - answer["first_start"]
    return run


def throughput_and_latency(topology: Topology, sink: Sink, sizes: Sizes) -> TopologyFigures:
    figures = TopologyFigures()
    model = "bench-e2e"
    for concurrency in (1, 8):
        with ready_worker(topology, sink, model, concurrency) as pids:
            for mode, jobs, options in (
                (SEQUENTIAL, sizes.sequential_jobs, {"inflight": 1}),
                (INFLIGHT, sizes.inflight_jobs, {"inflight": 32}),
                (BATCH, sizes.batch_jobs, {"batch": 100}),
            ):
                run = Run(topology.name, concurrency, mode)
                figures.runs.append(measure(topology, sink, pids, run, model, jobs, **options))
            figures.latency[concurrency] = offered_latency(
                topology, sink, model, sizes.latency_rate, sizes.latency_seconds
            )
    for concurrency in (1, 8):
        figures.drains.append(drain(topology, sink, concurrency, sizes.drain_jobs))
    return figures


def offered_latency(
    topology: Topology, sink: Sink, model: str, rate: float, seconds: float
) -> tuple[list[float], float]:
    """Submit call start -> handler start at `rate` Submits/s, and the rate achieved."""
    sink.clear()
    jobs = max(1, int(rate * seconds))
    answer = run_producer(topology.job_target, model, jobs, rate=rate)
    done = sink.wait_for(jobs, completion_timeout(jobs))
    offered = jobs / max(1e-9, answer["last_return"] - answer["first_start"])
    return [c.started - c.submitted for c in done], offered


def drain(topology: Topology, sink: Sink, concurrency: int, jobs: int) -> Run:
    """N jobs queued first, then one worker process starts: first start to last finish.

    CPU and Redis commands cover the prefill's end to the last completion; the
    worker's CPU is its whole life (start-up included), read before it stops.
    """
    model = f"bench-drain-{concurrency}"
    sink.clear()
    run_producer(topology.job_target, model, jobs, inflight=32)
    run = Run(topology.name, concurrency, f"prefilled drain of {jobs}")
    window = Window.start(topology, topology.pids)
    with servers.worker(topology.worker_target, model, HANDLER, concurrency, sink.env) as process:
        done: list[Completion] = sink.wait_for(jobs, completion_timeout(jobs))
        run.cpu = {**window.cpu_used(), "worker": cpu_seconds(process.pid)}
    run.commands = window.commands_per_job(jobs)
    run.jobs = jobs
    run.seconds = max(c.finished for c in done) - min(c.started for c in done)
    return run
