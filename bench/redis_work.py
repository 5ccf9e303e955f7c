"""Redis work per job, and what partitions cost (issue 18's targets).

One Submit at a time against `jobgate gateway` + `jobgate worker-server` on a
private redis-server without persistence, a `jobgate worker --concurrency 8`
draining: INFO commandstats and the redis-server's own CPU (from /proc) per
job, and jobs/s and each process's CPU per job with --redis-partitions 1 and
12, the two alternated `repeats` times (medians; compare only within one run:
the machine's 2 cores are shared by every process).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench import servers
from bench.commandstats import describe
from bench.e2e import SEQUENTIAL, Run, measure, ready_worker
from bench.report import table
from bench.sink import Sink

MODEL = "bench-redis-work"
CONCURRENCY = 8


@dataclass
class Row:
    partitions: int
    runs: list[Run]

    def median(self, value: list[float]) -> float:
        return statistics.median(value) if value else float("nan")

    def rate(self) -> float:
        return self.median([run.rate for run in self.runs if run.jobs])

    def ms_per_job(self, process: str) -> float:
        return self.median(
            [run.cpu[process] / run.jobs * 1000 for run in self.runs if process in run.cpu]
        )

    def commands(self) -> dict[str, float]:
        last = next((run.commands for run in reversed(self.runs) if run.commands), None)
        return last or {}


def one_run(partitions: int, sink: Sink, jobs: int) -> Run:
    flags = {"redis-partitions": str(partitions)}
    with (
        servers.on_redis(None, flags) as topology,
        ready_worker(topology, sink, MODEL, CONCURRENCY) as pids,
    ):
        run = Run(f"redis, {partitions} partitions", CONCURRENCY, SEQUENTIAL)
        return measure(topology, sink, pids, run, MODEL, jobs, inflight=1)


def redis_work(sink: Sink, jobs: int, repeats: int) -> list[Row]:
    rows = [Row(1, []), Row(12, [])]
    for _ in range(repeats):
        for row in rows:  # alternated: both see the same machine
            row.runs.append(one_run(row.partitions, sink, jobs))
    return rows


def redis_work_lines(rows: list[Row], jobs: int, repeats: int) -> list[str]:
    one = rows[0].rate()
    body = [
        [
            str(row.partitions),
            f"{row.rate():.0f}",
            f"{row.rate() / one:.2f}x" if one else "-",
            f"{sum(row.commands().values()):.1f}",
            f"{row.ms_per_job('redis'):.3f}",
            f"{row.ms_per_job('gateway'):.3f}",
            f"{row.ms_per_job('worker-server'):.3f}",
            f"{row.ms_per_job('worker'):.3f}",
        ]
        for row in rows
    ]
    header = ["partitions", "jobs/s", "vs 1", "Redis commands/job", "Redis CPU ms/job",
              "gateway ms/job", "worker-server ms/job", "worker ms/job"]  # fmt: skip
    lines = [
        "## 15. Redis work per job and what partitions cost (bench/redis_work.py)",
        "",
        f"One Submit at a time, worker concurrency {CONCURRENCY}, {jobs} jobs a run, "
        f"medians of {repeats} runs alternated; targets: at most 40 commands and 0.35 ms "
        "of Redis CPU per job, 12 partitions at least 0.9x the jobs/s of 1.",
        "",
        *table(header, body),
        "",
    ]
    for row in rows:
        lines.append(
            f"- commands per job, {row.partitions} partition(s): {describe(row.commands(), 12)}"
        )
    return lines
