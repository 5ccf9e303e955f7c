"""Fair share on against off: the end-to-end rows and Redis commands per job (issue 19, part 5).

`--fair-share` is fixed for a deployment's life, so every run is its own
deployment (a fresh redis-server, or a fresh `jobgate serve`) with one worker
process at concurrency 8, measured as section 1 measures (bench.e2e.measure:
one Submit at a time, 32 in flight, BatchSubmit of 100). The runs are made in
one sitting and interleaved, tenant then off, then off then tenant, and so
on, so the machine's drift falls on both modes alike; each row compares the
medians. Redis commands per job come from the same runs (INFO commandstats,
as section 5), averaged over the repeats, and the difference is named
command by command.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from bench import servers
from bench.e2e import BATCH, INFLIGHT, SEQUENTIAL, Run, Sizes, drain, measure, ready_worker
from bench.report import table
from bench.servers import Topology
from bench.sink import Sink

MODES = ("tenant", "off")
#: Each mode's server flags, in the order the first repeat runs them.
FAIR_MODES: Mapping[str, Mapping[str, str]] = {mode: {"fair-share": mode} for mode in MODES}
CONCURRENCY = 8
MODEL = "bench-fair"
#: The cost bound: fair share's throughput at least this share of off's.
BOUND = 0.90
#: A per-job command difference smaller than this is rounding, not a command.
NOISE = 0.05
#: The processes whose CPU is the deployment's own work per job (not the
#: producer's or the worker's, which the mode does not change).
SERVER_SIDE = ("gateway", "worker-server", "serve", "redis")


def producers(sizes: Sizes) -> list[tuple[str, int, dict[str, float]]]:
    return [
        (SEQUENTIAL, sizes.sequential_jobs, {"inflight": 1}),
        (INFLIGHT, sizes.inflight_jobs, {"inflight": 32}),
        (BATCH, sizes.batch_jobs, {"batch": 100}),
    ]


#: The producer name of a sitting's prefilled drains.
DRAIN = "prefilled drain"

Start = Callable[[Mapping[str, str]], AbstractContextManager[Topology]]


@dataclass
class Sitting:
    """One topology's interleaved runs: (mode, producer) -> its runs in order."""

    topology: str
    runs: dict[tuple[str, str], list[Run]] = field(default_factory=dict)

    def rate(self, mode: str, producer: str) -> float:
        return statistics.median(run.rate for run in self.runs[(mode, producer)])

    def rates(self, mode: str, producer: str) -> str:
        """A report cell: each run's jobs/s in order, then their median."""
        rates = ", ".join(f"{run.rate:.0f}" for run in self.runs[(mode, producer)])
        return f"{rates} (median {self.rate(mode, producer):.0f})"

    def cpu_ms(self, mode: str, producer: str) -> float:
        """The servers' and Redis's CPU milliseconds per job, the median over the runs:
        the mode's own cost, which the host's speed moves far less than throughput."""
        return statistics.median(
            sum(run.cpu.get(name, 0.0) for name in SERVER_SIDE) / run.jobs * 1000
            for run in self.runs[(mode, producer)]
        )

    def commands(self, mode: str, producer: str) -> dict[str, float]:
        """Commands per job by name, averaged over the runs."""
        runs = [run.commands for run in self.runs[(mode, producer)] if run.commands]
        names = {name for commands in runs for name in commands}
        return {name: sum(c.get(name, 0.0) for c in runs) / len(runs) for name in names}


def one_sitting(
    name: str,
    start: Start,
    sink: Sink,
    sizes: Sizes,
    repeats: int,
    modes: Mapping[str, Mapping[str, str]] = FAIR_MODES,
    drain_jobs: int = 0,
) -> Sitting:
    """Each mode's runs, interleaved: the modes in order, then reversed, and so on.

    With `drain_jobs`, each deployment also drains that many prefilled jobs
    (bench.e2e.drain, recorded as producer DRAIN) after its producers.
    """
    sitting = Sitting(name)
    order = list(modes)
    for repeat in range(repeats):
        for mode in order if repeat % 2 == 0 else order[::-1]:
            with start(modes[mode]) as topology:
                with ready_worker(topology, sink, MODEL, CONCURRENCY) as pids:
                    for producer, jobs, options in producers(sizes):
                        run = measure(topology, sink, pids, Run(name, CONCURRENCY, producer),
                                      MODEL, jobs, **options)  # fmt: skip
                        sitting.runs.setdefault((mode, producer), []).append(run)
                if drain_jobs:
                    run = drain(topology, sink, CONCURRENCY, drain_jobs)
                    sitting.runs.setdefault((mode, DRAIN), []).append(run)
    return sitting


def fair_share_sittings(sink: Sink, sizes: Sizes, repeats: int) -> list[Sitting]:
    def on_redis(settings: Mapping[str, str]) -> AbstractContextManager[Topology]:
        return servers.on_redis(None, settings)

    return [
        one_sitting("redis (no persistence)", on_redis, sink, sizes, repeats),
        one_sitting("embedded", servers.embedded, sink, sizes, repeats),
    ]


def throughput_lines(sittings: list[Sitting], sizes: Sizes, repeats: int) -> list[str]:
    rows = []
    for sitting in sittings:
        for producer, _, _ in producers(sizes):
            ratio = sitting.rate("tenant", producer) / sitting.rate("off", producer)
            verdict = "within" if ratio >= BOUND else "**OVER**"
            cpu = [sitting.cpu_ms(mode, producer) for mode in MODES]
            rows.append([sitting.topology, producer, sitting.rates("tenant", producer),
                         sitting.rates("off", producer), f"{ratio:.2f}", verdict,
                         f"{cpu[0]:.2f} / {cpu[1]:.2f}"])  # fmt: skip
    header = ["topology", "producer", "--fair-share tenant jobs/s", "--fair-share off jobs/s",
              "tenant / off (medians)", f"bound {BOUND:.2f}",
              "servers + Redis CPU ms per job, tenant / off"]  # fmt: skip
    return [f"## 13. Fair share on against off (end to end, worker concurrency {CONCURRENCY}; "
            f"{repeats} runs of each, interleaved, in one sitting)", "", *table(header, rows), "",
            "Each run is a fresh deployment of its mode (`--fair-share` is fixed for a "
            "deployment's life) measured as section 1 (bench/fairness.py); the runs "
            "alternate tenant, off, off, tenant, ... One tenant submits (the producer's "
            "JobClient), so the figures are fair share's own cost per job, not its "
            f"interleaving. The bound: tenant's median at least {BOUND:.0%} of off's. The "
            "last column is the CPU of the servers and Redis over each run (/proc, as "
            "section 4), per job, the median of the runs.",
            ""]  # fmt: skip


def command_difference(on: dict[str, float], off: dict[str, float]) -> tuple[str, str]:
    """(added, removed): the commands per job fair share runs more, and fewer, largest first."""
    delta = {name: on.get(name, 0.0) - off.get(name, 0.0) for name in on.keys() | off.keys()}
    ordered = sorted(delta.items(), key=lambda item: (-abs(item[1]), item[0]))
    added = ", ".join(f"{name} +{value:.2f}" for name, value in ordered if value >= NOISE)
    removed = ", ".join(f"{name} {value:.2f}" for name, value in ordered if value <= -NOISE)
    return added or "none", removed or "none"


def command_lines(sittings: list[Sitting], sizes: Sizes) -> list[str]:
    rows = []
    for sitting in sittings:
        for producer, _, _ in producers(sizes):
            on, off = sitting.commands("tenant", producer), sitting.commands("off", producer)
            if not on or not off:
                continue  # the embedded store has no Redis
            added, removed = command_difference(on, off)
            rows.append([producer, f"{sum(on.values()):.1f}", f"{sum(off.values()):.1f}",
                         f"{sum(on.values()) - sum(off.values()):+.2f}", added,
                         removed])  # fmt: skip
    header = ["producer", "commands per job, tenant", "off", "difference", "more per job",
              "fewer per job"]  # fmt: skip
    return ["## 14. Redis commands per job, fair share on against off (INFO commandstats, "
            "as section 5)", "", *table(header, rows), "",
            "The same runs as section 13 on Redis, each mode's commands per job averaged "
            "over its runs; a difference under "
            f"{NOISE} per job is left out. Commands Lua scripts call are counted, so this "
            "is Redis work per job. Fair share adds no script call: a difference in EVALSHA "
            "(and in the ZRANGEs of claim rounds) is how many jobs each claim call happened "
            "to take.",
            ""]  # fmt: skip
