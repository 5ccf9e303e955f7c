"""The jobgate benchmark (issue 11): every figure from one run, as Markdown.

    python -m bench.run [--quick] [--out bench/RESULTS.md] [--label TEXT] [--only SECTION]...

`make bench` is the full run. `--quick` only proves the harness works (small
sizes, under two minutes); its figures mean nothing. The modules:
bench.e2e (throughput, drain, latency, CPU, Redis commands per job),
bench.depth (cost against queue depth, memory per job), bench.under_load
(streams and long-polls, on serve and on Redis), bench.roundtrips (MONITOR
round trips per RPC, the batched ones per job too),
bench.cluster (Redis Cluster: 1 or 3 masters x 1 or 12 partitions),
bench.floors (a bare gRPC echo and bare redis-py calls: the floors),
bench.spread (many tenants against one, ten pools against one), bench.fairness
(fair share on against off: end to end and Redis commands per job),
bench.timing (the durations the tests measure, against the bounds no test
asserts),
bench.listing (ListJobs against the jobs held, its indexes' memory, the
commands each transition gained; `--only list`), bench.redis_work (Redis
commands and CPU per job, 1 partition against 12; `--only redis-work`),
bench.console (the web console's Jobs page with the list section's largest
number of jobs held, and the StreamStatus calls of live job pages; `--only
console`), bench.durable (the durable embedded store against the in-memory
one and the disk's fsyncs, `--only durable`; restart time and bytes per job,
`--only restart`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench import servers
from bench.cluster import cluster_lines, cluster_rows
from bench.commandstats import describe
from bench.console import console_figures, console_lines
from bench.depth import WARMUP_CALLS, DepthRow, depth_rows
from bench.durable import durable_sitting, fsyncs_per_second, restart, restart_lines
from bench.durable import throughput_lines as durable_lines
from bench.e2e import Run, Sizes, TopologyFigures, throughput_and_latency
from bench.fairness import command_lines, fair_share_sittings, throughput_lines
from bench.floors import Floors
from bench.floors import measure as measure_floors
from bench.listing import MIX, ListRow, list_rows, transition_commands
from bench.redis_work import redis_work, redis_work_lines
from bench.report import latency_cells, ms, percentile, table
from bench.roundtrips import REPORT_BATCH, Trips, round_trips
from bench.sink import Sink, sink
from bench.spread import spread_lines, spread_rows
from bench.timing import QUICK_TESTS, timing_lines, verdicts
from bench.timing import measure as measure_timings
from bench.under_load import IDLE, LoadState, under_load

PROCESSES = ("producer", "gateway", "worker-server", "serve", "worker", "redis")


@dataclass(frozen=True)
class Plan:
    e2e: Sizes
    depths: list[int]
    depth_calls: int
    fill_budget: float  # seconds the bulk fill may take in all
    streams: int
    pollers: int
    probe_rate: float
    probe_seconds: float
    trips_calls: int
    cluster_jobs: int  # per Redis Cluster row
    floor_calls: int  # per floor measurement
    work_jobs: int  # per run of the Redis-work section
    work_repeats: int
    timing_tests: tuple[str, ...]  # where section 11 finds the tests that time
    spread_jobs: int  # queued on each deployment of section 12
    spread_tenants: int  # the many tenants of section 12
    spread_calls: int  # timed calls of each kind per deployment
    fair_repeats: int  # runs of each fair-share mode in section 13
    list_depths: list[int]  # jobs held when ListJobs is probed
    list_calls: int  # timed ListJobs calls per filter and page
    transition_calls: int  # calls of each transition for its commands
    durable_repeats: int  # runs of each store mode in section 18
    restart_jobs: tuple[int, int]  # (QUEUED, COMPLETED) jobs of section 19's directory


FULL = Plan(
    Sizes(sequential_jobs=2000, inflight_jobs=5000, batch_jobs=5000, drain_jobs=5000,
          latency_rate=200, latency_seconds=10),
    depths=[1_000, 100_000, 1_000_000], depth_calls=200, fill_budget=900,
    streams=2000, pollers=200, probe_rate=20, probe_seconds=10, trips_calls=200,
    cluster_jobs=2000, floor_calls=5000, timing_tests=("tests",), work_jobs=2000, work_repeats=3,
    spread_jobs=100_000, spread_tenants=1000, spread_calls=200, fair_repeats=3,
    list_depths=[1_000, 100_000, 1_000_000], list_calls=200, transition_calls=500,
    durable_repeats=3, restart_jobs=(100_000, 900_000),
)  # fmt: skip
QUICK = Plan(
    Sizes(sequential_jobs=60, inflight_jobs=200, batch_jobs=200, drain_jobs=200,
          latency_rate=200, latency_seconds=1),
    depths=[1_000, 5_000], depth_calls=20, fill_budget=60,
    streams=100, pollers=20, probe_rate=20, probe_seconds=1, trips_calls=20,
    cluster_jobs=200, floor_calls=300, timing_tests=QUICK_TESTS, work_jobs=60, work_repeats=1,
    spread_jobs=1000, spread_tenants=10, spread_calls=20, fair_repeats=1,
    list_depths=[1_000, 5_000], list_calls=20, transition_calls=50,
    durable_repeats=1, restart_jobs=(200, 1_800),
)  # fmt: skip


def _throughput_lines(figures: list[TopologyFigures]) -> list[str]:
    rows = [
        [run.topology, str(run.concurrency), run.mode,
         *([run.note, "", ""] if run.note else [str(run.jobs), f"{run.seconds:.2f}",
                                                f"{run.rate:.0f}"])]
        for topology in figures for run in topology.runs
    ]  # fmt: skip
    header = ["topology", "worker concurrency", "producer", "jobs", "seconds", "jobs/s"]
    return ["## 1. End-to-end throughput (first Submit call start -> last handler finish)", "",
            *table(header, rows), ""]  # fmt: skip


def _drain_lines(figures: list[TopologyFigures]) -> list[str]:
    rows = [[run.topology, str(run.concurrency), str(run.jobs), f"{run.seconds:.2f}",
             f"{run.rate:.0f}"] for topology in figures for run in topology.drains]  # fmt: skip
    header = ["topology", "worker concurrency", "jobs queued first", "seconds", "jobs/s"]
    return ["## 2. Prefilled drain (jobs queued, then one worker process starts; first handler "
            "start -> last finish)", "", *table(header, rows), "",
            "The drains' CPU and Redis commands are the \"prefilled drain\" rows of sections "
            "4 and 5.", ""]  # fmt: skip


def _latency_lines(figures: list[TopologyFigures], sizes: Sizes) -> list[str]:
    rows = [[topology.runs[0].topology, str(concurrency), f"{offered:.0f}", str(len(samples)),
             *latency_cells(samples)]
            for topology in figures
            for concurrency, (samples, offered) in sorted(topology.latency.items())]  # fmt: skip
    header = ["topology", "worker concurrency", "Submits/s achieved", "jobs",
              "p50 ms", "p95 ms", "p99 ms", "max ms"]  # fmt: skip
    title = (f"## 3. Latency at {sizes.latency_rate:.0f} Submits/s offered for "
             f"{sizes.latency_seconds:.0f} s (Submit call start -> handler start)")  # fmt: skip
    return [title, "", *table(header, rows), ""]


def _measured(figures: list[TopologyFigures]) -> list[Run]:
    """Every run with figures, each topology's drains after its producer runs."""
    return [run for topology in figures for run in [*topology.runs, *topology.drains]
            if not run.note]  # fmt: skip


def _cpu_lines(figures: list[TopologyFigures]) -> list[str]:
    rows = []
    for run in _measured(figures):
        cells = [run.cpu_per_1000(name) for name in PROCESSES]
        busiest = max((value, name) for value, name in zip(cells, PROCESSES, strict=True)
                      if value is not None)  # fmt: skip
        rows.append([run.topology, str(run.concurrency), run.mode,
                     *("-" if value is None else f"{value:.2f}" for value in cells),
                     busiest[1]])  # fmt: skip
    header = ["topology", "worker concurrency", "producer", *PROCESSES, "most CPU"]
    return ["## 4. CPU seconds per 1,000 jobs, by process (/proc utime+stime)", "",
            *table(header, rows), "",
            "`redis` is jobgate's Redis; the timing sink is a separate redis-server, not "
            "counted. `producer` is the producer process's own CPU from first call to last "
            "return. A prefilled drain's window runs from the prefill's end to the last "
            "completion, with no producer in it; its `worker` is the worker process's whole "
            "life, start-up included.", ""]  # fmt: skip


def _commands_lines(figures: list[TopologyFigures]) -> list[str]:
    rows = [[str(run.concurrency), run.mode, describe(run.commands)]
            for run in _measured(figures) if run.commands]  # fmt: skip
    return ["## 5. Redis commands per job (INFO commandstats deltas over each run)", "",
            *table(["worker concurrency", "producer", "commands per job; scripts run; largest"],
                   rows), "",
            "INFO counts the commands Lua scripts call too, so this is Redis work per job; "
            "EVALSHA alone is the scripts run (round trips per RPC are in section 6). "
            "Background work (recovery, leadership, health probes) during the run is "
            "included.", ""]  # fmt: skip


def _trips_lines(trips: dict[str, Trips]) -> list[str]:
    rows = [[name, f"{row.per_call:.2f}", str(row.jobs), f"{row.per_job:.3f}",
             ", ".join(f"{cmd} {value:.2f}" for cmd, value in sorted(row.commands.items()))]
            for name, row in trips.items()]  # fmt: skip
    header = ["RPC", "commands per call", "jobs per call", "commands per job",
              "by command (per call)"]  # fmt: skip
    return ["## 6. Redis round trips per RPC (MONITOR; gateway + worker-server, AOF everysec)",
            "", *table(header, rows), "",
            "EVALSHA is the transition's one script. XREAD, where it shows, is the audit-log "
            "tail of the recovery leader waking on the new event (off the RPC's path). "
            "ReportAndClaim runs as the worker daemon does: each call ends the jobs the "
            "previous call claimed; in the batched row a job is one result, one heartbeat "
            f"(of {REPORT_BATCH} jobs held throughout) and one claim.", ""]  # fmt: skip


def _p50_p99(samples: list[float]) -> str:
    return f"{ms(percentile(samples, 0.5))} / {ms(percentile(samples, 0.99))}"


def _depth_lines(rows: list[DepthRow], note: str, calls: int) -> list[str]:
    cells = [[f"{row.depth:,}", _p50_p99(row.submit), _p50_p99(row.get), f"{row.position:,}",
              _p50_p99(row.claim), f"{row.fill_rate:.0f}", f"{row.memory_per_job:.0f}",
              f"{row.script_usec:.0f} / {row.command_usec:.1f}"]
             for row in rows]  # fmt: skip
    header = ["queued", "Submit p50 / p99 ms", "Get p50 / p99 ms", "queue_position read",
              "ClaimNext p50 / p99 ms", "bulk fill jobs/s",
              "used_memory bytes per job", "Redis µs per script / per command"]  # fmt: skip
    lines = [f"## 7. Cost against queue depth (Redis, no persistence, 1 KiB payloads, {calls} "
             "calls each)", "", *table(header, cells), ""]  # fmt: skip
    if note:
        lines += [f"Largest depth measured: {rows[-1].depth if rows else 0:,}; {note}.", ""]
    lines += ["The queue is filled through RedisStore's submit script, pipelined "
              "(bench/depth.py); the probes are gRPC calls to the gateway and worker-server. "
              "used_memory per job is (used_memory now - before the fill) / queued. "
              f"Each depth's timed calls follow {WARMUP_CALLS} untimed ones of each kind. The "
              "last column is Redis's own time over the timed calls (INFO commandstats): per "
              "script call, and per command the scripts ran; when both grow alike with the "
              "depth, it is the dataset's size in memory, not more work per call.",
              ""]  # fmt: skip
    return lines


SERVER_PROCESSES = ("gateway", "worker-server", "serve")


def _memory_cells(state: LoadState) -> list[str]:
    """RSS MiB and threads of each server process, "-" where the topology has none."""
    return [cell for name in SERVER_PROCESSES
            for cell in ((f"{state.memory[name][0] / 2**20:.0f}", str(state.memory[name][1]))
                         if name in state.memory else ("-", "-"))]  # fmt: skip


def _load_lines(states: list[LoadState], plan: Plan) -> list[str]:
    rows = [[state.topology, state.label, *_memory_cells(state), *latency_cells(state.dispatch)]
            for state in states]  # fmt: skip
    header = ["topology", "state",
              *(f"{name} {what}" for name in SERVER_PROCESSES for what in ("RSS MiB", "threads")),
              "dispatch p50 ms", "p95 ms", "p99 ms", "max ms"]  # fmt: skip
    retried = ", ".join(f"{state.topology} {state.retried_opens}" for state in states
                        if state.label != IDLE)  # fmt: skip
    return [f"## 8. {plan.streams:,} open StreamStatus streams and {plan.pollers} long-polling "
            "claims on one gateway / worker-server, or one serve", "", *table(header, rows), "",
            f"Dispatch: further jobs at {plan.probe_rate:.0f}/s for {plan.probe_seconds:.0f} s "
            "to a worker process (concurrency 1), Submit call start -> handler start. The "
            "streams and polls come from one load process (bench/load.py), streams opened "
            "250 at a time; opening calls that came back CANCELLED without reaching the "
            f"handler and were retried: {retried}.", ""]  # fmt: skip


def _floor_lines(floors: Floors) -> list[str]:
    rows = [
        ["bare grpc.aio unary echo, server (asyncio)", f"{floors.echo_server_ms:.3f}",
         f"{floors.echo_rate:.0f} calls/s one at a time"],
        ["bare grpc.aio unary echo, client (asyncio)", f"{floors.echo_client_ms:.3f}", ""],
        ["redis-py EVALSHA `return 1`, client", f"{floors.redis_py_ms:.3f}",
         f"Redis {floors.redis_script_us:.1f} µs per call"],
        ["redis-py EVALSHA, 40 keys + 20 args (a transition's shape), client",
         f"{floors.redis_py_wide_ms:.3f}",
         f"Redis {floors.redis_script_wide_us:.1f} µs per call (EXISTS of each key)"],
    ]  # fmt: skip
    return ["## 10. Floors: the parts alone (bench/floors.py)", "",
            *table(["what", "CPU ms per call", "note"], rows), "",
            "A job costs at least two unary calls (Submit, then ReportAndClaim on the "
            "worker side) and two script calls, so the floor of section 4's CPU per 1,000 "
            "jobs is about 2 x (server + client echo) for the gRPC parts plus 2 x the "
            "redis-py call; the rest is jobgate's own work and Redis's script time.",
            ""]  # fmt: skip


def _floors_section(plan: Plan, _: Sink) -> list[str]:
    return _floor_lines(measure_floors(plan.floor_calls))


def _spread_section(plan: Plan, _: Sink) -> list[str]:
    rows = spread_rows(plan.spread_jobs, plan.spread_tenants, plan.spread_calls)
    return spread_lines(rows, plan.spread_calls)


def _fair_section(plan: Plan, timing: Sink) -> list[str]:
    sittings = fair_share_sittings(timing, plan.e2e, plan.fair_repeats)
    return [*throughput_lines(sittings, plan.e2e, plan.fair_repeats),
            *command_lines(sittings, plan.e2e)]  # fmt: skip


def _durable_section(plan: Plan, timing: Sink) -> list[str]:
    sitting = durable_sitting(timing, plan.e2e, plan.durable_repeats)
    with tempfile.TemporaryDirectory(prefix="jobgate-bench-fsync-") as directory:
        fsyncs = fsyncs_per_second(Path(directory))
    return durable_lines(sitting, plan.e2e, plan.durable_repeats, fsyncs)


def _restart_section(plan: Plan, _: Sink) -> list[str]:
    # apart from "durable": its fill of a million jobs takes most of the time
    return restart_lines([restart(*plan.restart_jobs)])


def _timing_section(plan: Plan, _: Sink) -> list[str]:
    recorded, pytest_line, command = measure_timings(plan.timing_tests)
    return timing_lines(verdicts(recorded), pytest_line, command)


def _list_lines(rows: list[ListRow], calls: int) -> list[str]:
    base = rows[0] if rows else None
    cells = []
    for row in rows:
        for label, (first, deep) in row.samples.items():
            assert base is not None
            ratio = percentile(first, 0.5) / percentile(base.samples[label][0], 0.5)
            cells.append([f"{row.jobs:,}", label, _p50_p99(first), _p50_p99(deep),
                          f"{ratio:.2f}x"])  # fmt: skip
    header = ["jobs held", "filter", "first page p50 / p99 ms", "mid-walk page p50 / p99 ms",
              "first page p50 vs the smallest"]  # fmt: skip
    memory = [[f"{row.jobs:,}", *(f"{value:.0f}" for value in row.memory.values())]
              for row in rows]  # fmt: skip
    kinds = list(rows[0].memory) if rows else []
    return [f"## 16. ListJobs against the jobs held (Redis, no persistence, one tenant, "
            f"page_size 50, {calls} calls each)", "", *table(header, cells), "",
            f"Mix: {MIX}; filled through the store's scripts (bench/listing.py). "
            "A mid-walk page starts from a cursor half-way down the jobs.", "",
            "### Redis memory of the indexes, bytes per job held (MEMORY USAGE, every element)",
            "", *table(["jobs held", *kinds], memory), "",
            "index:expiring holds the terminal jobs only (90 % here).", ""]  # fmt: skip


def _commands_delta_lines(
    commit: str, before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> list[str]:
    rows = []
    for name, now in after.items():
        was = before.get(name, {})
        gained = {cmd: value - was.get(cmd, 0.0) for cmd, value in now.items() if cmd != "total"}
        shown = ", ".join(f"{cmd} {value:+.2f}" for cmd, value in sorted(gained.items())
                          if abs(value) >= 0.005)  # fmt: skip
        rows.append([name, f"{was.get('total', 0):.2f}", f"{now['total']:.2f}", shown])
    return ["### Redis commands per transition, before the indexes and now (one sitting)", "",
            *table(["transition", f"before ({commit})", "now", "gained, by command"], rows),
            "", "INFO commandstats over each transition's calls alone (bench/"
            "transition_commands.py), the commands its script ran.", ""]  # fmt: skip


def _list_section(plan: Plan, _: Sink) -> list[str]:
    with servers.on_redis(None) as topology:
        rows = asyncio.run(list_rows(topology, plan.list_depths, plan.list_calls))
        assert topology.redis is not None
        commit, before, after = transition_commands(topology.redis.url, plan.transition_calls)
    return [*_list_lines(rows, plan.list_calls), *_commands_delta_lines(commit, before, after)]


def _console_section(plan: Plan, _: Sink) -> list[str]:
    pages, distinct = (20, 4) if plan is QUICK else (200, 20)
    figures = console_figures(plan.list_depths[-1], plan.list_calls, pages, distinct)
    return console_lines(figures)


def _header(plan_name: str, label: str) -> list[str]:
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    lines = [f"# jobgate benchmark, {datetime.now():%Y-%m-%d %H:%M} ({plan_name})", "",
             f"{servers.environment_note()}; load average at start {load}."]  # fmt: skip
    if label:
        lines += ["", f"**{label}**"]
    return [*lines, "",
            "Method (the peers'): a private redis-server without persistence; separate "
            "`jobgate gateway`, `jobgate worker-server` (or one `jobgate serve` on the "
            "embedded store) and `jobgate worker --handler bench.handlers:noop` processes; "
            "a producer process (`bench/producer.py`, `jobgate.JobClient`). Each job's "
            "handler does one RPUSH of its submit, start and finish times to a separate "
            "timing-sink redis-server, which is how completions are timed.", ""]  # fmt: skip


#: Every section that runs on both: the embedded store, then Redis without persistence.
BOTH_TOPOLOGIES: tuple[Callable[[], AbstractContextManager[servers.Topology]], ...] = (
    servers.embedded,
    lambda: servers.on_redis(None),
)


def _e2e_section(plan: Plan, timing: Sink) -> list[str]:
    figures = []
    for start in BOTH_TOPOLOGIES:
        with start() as topology:
            figures.append(throughput_and_latency(topology, timing, plan.e2e))
    return [*_throughput_lines(figures), *_drain_lines(figures),
            *_latency_lines(figures, plan.e2e), *_cpu_lines(figures),
            *_commands_lines(figures)]  # fmt: skip


def _trips_section(plan: Plan, _: Sink) -> list[str]:
    with servers.on_redis() as topology:
        return _trips_lines(asyncio.run(round_trips(topology, plan.trips_calls)))


def _depth_section(plan: Plan, _: Sink) -> list[str]:
    with servers.on_redis(None) as topology:
        rows, note = asyncio.run(
            depth_rows(topology, plan.depths, plan.depth_calls, plan.fill_budget)
        )
    return _depth_lines(rows, note, plan.depth_calls)


def _load_section(plan: Plan, timing: Sink) -> list[str]:
    states = []
    for start in BOTH_TOPOLOGIES:
        with start() as topology:
            states += under_load(topology, timing, plan.streams, plan.pollers,
                                 plan.probe_rate, plan.probe_seconds)  # fmt: skip
    return _load_lines(states, plan)


def _work_section(plan: Plan, timing: Sink) -> list[str]:
    return redis_work_lines(
        redis_work(timing, plan.work_jobs, plan.work_repeats), plan.work_jobs, plan.work_repeats
    )


def _cluster_section(plan: Plan, timing: Sink) -> list[str]:
    return cluster_lines(cluster_rows(timing, plan.cluster_jobs))


# Sections 1-5 come from one set of end-to-end runs.
SECTIONS: dict[str, Callable[[Plan, Sink], list[str]]] = {
    "e2e": _e2e_section,
    "roundtrips": _trips_section,
    "depth": _depth_section,
    "load": _load_section,
    "cluster": _cluster_section,
    "redis-work": _work_section,
    "floors": _floors_section,
    "spread": _spread_section,
    "fair": _fair_section,
    "timing": _timing_section,
    "list": _list_section,
    "console": _console_section,
    "durable": _durable_section,
    "restart": _restart_section,
}


def run(
    plan: Plan, plan_name: str, label: str, only: list[str], out: Path | None
) -> tuple[list[str], bool]:
    """The report, and whether every section ran (a failed one says why in it).

    The report so far is written to `out` after each section, so a run that
    dies late keeps the figures it measured.
    """
    started = time.monotonic()
    lines, ok = _header(plan_name, label), True
    with sink() as timing:
        for name in only:
            print(f"bench: {name} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
            try:
                lines += SECTIONS[name](plan, timing)
            except Exception as error:  # the other sections' figures still count
                traceback.print_exc()
                lines += [f"## {name}: failed", "", f"`{type(error).__name__}: {error}`", ""]
                ok = False
            if out:
                out.write_text("\n".join([*lines, "(run in progress)", ""]))
    command = shlex.join(["python", "-m", "bench.run", *sys.argv[1:]])
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    wall = time.monotonic() - started
    lines += ["## Run", "", f"Command: `{command}` (`make bench` runs the full one); wall time "
              f"{wall:.0f} s; load average at the end {load}.", ""]  # fmt: skip
    return lines, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: proves the harness")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    parser.add_argument("--label", default="", help="a note printed under the title")
    parser.add_argument(
        "--only", action="append", choices=sorted(SECTIONS), help="run these sections only"
    )
    args = parser.parse_args()
    plan, name = (QUICK, "quick mode: not figures") if args.quick else (FULL, "full run")
    lines, ok = run(plan, name, args.label, args.only or list(SECTIONS), args.out)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
