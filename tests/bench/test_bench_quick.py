"""The benchmark's quick mode runs end to end and reports every row.

It proves the harness works; no figure is asserted (figures come from the
full `make bench` run, never from timed assertions).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.producer import batch_submit_missing
from tests.redis_server import require_redis_server

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = ("embedded", "redis (no persistence)")
MODES = ("1 Submit at a time", "32 Submits in flight", "BatchSubmit of 100")

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    require_redis_server()
    out = tmp_path_factory.mktemp("bench") / "quick.md"
    command = [sys.executable, "-m", "bench.run", "--quick", "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, done.stderr[-4000:]
    return out.read_text()


def _row(report: str, *cells: str) -> str:
    """The table row that starts with these cells; fails naming them when absent."""
    start = "| " + " | ".join(cells) + " |"
    rows = [line for line in report.splitlines() if line.startswith(start)]
    assert rows, f"no row starting {start!r}"
    return rows[0]


def test_throughput_has_a_row_per_topology_concurrency_and_producer(report: str) -> None:
    for topology in TOPOLOGIES:
        for concurrency in ("1", "8"):
            for mode in MODES:
                _row(report, topology, concurrency, mode)


def test_batch_submit_row_is_measured_or_says_why_the_rpc_is_missing(report: str) -> None:
    missing = batch_submit_missing()
    row = _row(report, "embedded", "1", "BatchSubmit of 100")
    if missing:
        assert missing in row
    else:
        assert re.search(r"\| \d+ \| [\d.]+ \| \d+ \|$", row)


def test_drain_has_a_row_per_topology_and_concurrency(report: str) -> None:
    assert "## 2. Prefilled drain" in report
    for topology in TOPOLOGIES:
        for concurrency in ("1", "8"):
            _row(report, topology, concurrency, "200")


def test_latency_has_percentiles_per_topology_and_concurrency(report: str) -> None:
    section = report.split("## 3. ", 1)[1].split("## 4. ", 1)[0]
    for topology in TOPOLOGIES:
        for concurrency in ("1", "8"):
            row = rf"\| {re.escape(topology)} \| {concurrency} \|( [\d.]+ \|){{6}}"
            assert re.search(row, section), (topology, concurrency)


def test_cpu_has_a_column_per_process_and_names_the_busiest(report: str) -> None:
    section = report.split("## 4. ", 1)[1].split("## 5. ", 1)[0]
    assert "| producer | gateway | worker-server | serve | worker | redis | most CPU |" in section
    # 2 concurrencies x the producers (one Submit at a time, 32 in flight, BatchSubmit)
    runs = 6 if batch_submit_missing() is None else 4
    assert section.count("| redis (no persistence) |") == runs + 2  # and the 2 drains
    assert section.count("| embedded |") == runs + 2


def test_drains_have_cpu_per_process_with_the_worker_and_redis_commands(report: str) -> None:
    cpu = report.split("## 4. ", 1)[1].split("## 5. ", 1)[0]
    commands = report.split("## 5. ", 1)[1].split("## 6. ", 1)[0]
    number = r" [\d.]+ \|"
    for concurrency in ("1", "8"):
        drain = rf"\| {concurrency} \| prefilled drain of 200 \|"
        # producer, gateway, worker-server, serve, worker, redis
        redis_cells = rf" - \|{number}{number} - \|{number}{number}"
        embedded_cells = rf" - \| - \| - \|{number}{number} - \|"
        assert re.search(rf"^\| redis \(no persistence\) {drain}{redis_cells}", cpu, re.M)
        assert re.search(rf"^\| embedded {drain}{embedded_cells}", cpu, re.M)
        assert re.search(rf"^{drain} [\d.]+; evalsha [\d.]+;", commands, re.M)


def test_redis_commands_per_job_cover_every_redis_run(report: str) -> None:
    section = report.split("## 5. ", 1)[1].split("## 6. ", 1)[0]
    runs = 6 if batch_submit_missing() is None else 4  # with BatchSubmit rows once it exists
    runs += 2  # the prefilled drains
    assert len(re.findall(r"^\| [18] \| .* \| [\d.]+; evalsha [\d.]+;", section, re.M)) == runs


def test_round_trips_have_every_rpc_at_one_job_a_call(report: str) -> None:
    for rpc in ("Submit", "Get", "ClaimNext (job waiting)", "Heartbeat", "SetResult", "Cancel"):
        assert _row(report, rpc).split(" | ")[2] == "1", rpc


BATCHED_TRIPS = [
    ("ReportAndClaim (1 result + claim 1, job waiting)", 1),
    ("ReportAndClaim (8 results + 8 heartbeats + claim 8, jobs waiting)", 8),
    ("BatchSubmit of 100", 100),
]


@pytest.mark.parametrize(("rpc", "jobs"), BATCHED_TRIPS)
def test_round_trips_cover_the_batched_rpcs_per_call_and_per_job(
    report: str, rpc: str, jobs: int
) -> None:
    per_call, jobs_cell, per_job = _row(report, rpc).split(" | ")[1:4]
    assert jobs_cell == str(jobs)
    # per call has 2 decimals, per job 3: they agree to the rounding
    assert float(per_job) == pytest.approx(float(per_call) / jobs, abs=0.006)


def test_depth_has_every_quick_depth_and_memory_per_job(report: str) -> None:
    for depth in ("1,000", "5,000"):
        row = _row(report, depth)
        # used_memory bytes per job, then Redis µs per script / per command
        assert re.search(r"\| \d+ \| \d+ / [\d.]+ \|$", row), row


def test_load_has_idle_and_loaded_states_on_each_topology(report: str) -> None:
    for topology in TOPOLOGIES:
        for state in ("idle", "100 streams + 20 long-polls"):
            _row(report, topology, state)
    assert "retried: embedded " in report and ", redis (no persistence) " in report


def _cluster_section(report: str) -> str:
    return report.split("## 9. Redis Cluster", 1)[1].split("## Run", 1)[0]


CLUSTER_ROWS = [(1, 1, 1), (1, 12, 1), (1, 12, 32), (3, 1, 1), (3, 12, 1), (3, 12, 32)]


@pytest.mark.parametrize(("masters", "partitions", "tenants"), CLUSTER_ROWS)
def test_cluster_has_a_measured_row_per_masters_partitions_and_tenants(
    report: str, masters: int, partitions: int, tenants: int
) -> None:
    # owners, partitions and scripts per master; jobs, seconds, jobs/s; CPU of
    # each master the cluster has, "-" for the others; then gateway,
    # worker-server and worker.
    layout = r"\| \d \| [\d, ]+ \| [\d., ]+ \| \d+ \| [\d.]+ \| \d+ \|"
    cpu = r"( [\d.]+ \|)" * masters + r"( - \|)" * (3 - masters) + r"( [\d.]+ \|){3}"
    row = rf"^\| {masters} \| {partitions} \| {tenants} {layout}{cpu}$"
    assert len(re.findall(row, _cluster_section(report), re.M)) == 1


def test_cluster_rows_count_the_masters_owning_partitions(report: str) -> None:
    owners = {
        (int(m), int(p), int(t)): (int(owning), per_master)
        for m, p, t, owning, per_master in re.findall(
            r"^\| (\d) \| (\d+) \| (\d+) \| (\d) \| ([\d, ]+) \|",
            _cluster_section(report),
            re.M,
        )
    }
    assert owners[1, 1, 1] == (1, "1") and owners[1, 12, 1] == (1, "12")
    assert owners[3, 1, 1][0] == 1
    # Twelve hash tags over three masters' slot ranges land on more than one.
    assert owners[3, 12, 32][0] > 1 and sum(map(int, owners[3, 12, 32][1].split(","))) == 12


def test_floors_measure_the_grpc_echo_and_redis_py_calls(report: str) -> None:
    for what in ("bare grpc.aio unary echo, server (asyncio)",
                 "bare grpc.aio unary echo, client (asyncio)",
                 "redis-py EVALSHA `return 1`, client",
                 "redis-py EVALSHA, 40 keys + 20 args (a transition's shape), client"):  # fmt: skip
        assert re.search(r"\| \d+\.\d{3} \|", _row(report, what)), what


def test_run_line_names_the_command_and_wall_time(report: str) -> None:
    assert re.search(r"Command: `python -m bench.run --quick .*`.*wall time \d+ s", report)


def test_timing_has_a_judged_row_per_figure_of_the_quick_tests(report: str) -> None:
    section = report.split("## 11. Timing bounds", 1)[1].split("## Run", 1)[0]
    row = _row(section, "worker stop: an idle daemon stops", "-")
    assert re.search(r"\| [\d.]+ \| 2000 \| (within|\*\*OVER\*\*) \|", row), row
    assert re.search(r"\d+ of \d+ figures within their bounds", section)
    assert "The tests, run as `python -m pytest -q -m timing tests/worker/" in section


def _section(report: str, number: int) -> str:
    return report.split(f"## {number}. ", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("store", ["redis (no persistence)", "embedded"])
def test_spread_compares_many_tenants_and_ten_pools_against_one_on_each_store(
    report: str, store: str
) -> None:
    section = _section(report, 12)
    for spread, single in (("10 tenants x 100", "1 tenant x 1,000"),
                           ("10 pools x 100", "1 pool x 1,000")):  # fmt: skip
        for case in (spread, single):
            assert re.search(
                r"\| [\d.]+ / [\d.]+ \| [\d.]+ / [\d.]+ \|$", _row(section, store, case)
            )
        ratio = _row(section, store, f"{spread} / {single}")
        assert re.search(
            r"\|  \| [\d.]+x (within|\*\*OVER\*\*) \| [\d.]+x (within|\*\*OVER\*\*) \|$", ratio
        )


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_fair_share_on_against_off_has_a_judged_row_per_producer(
    report: str, topology: str
) -> None:
    section = _section(report, 13)
    for mode in MODES:
        row = _row(section, topology, mode)
        assert re.search(r"\| [\d.]+ \| (within|\*\*OVER\*\*) \| [\d.]+ / [\d.]+ \|$", row), row


def test_fair_share_commands_per_job_name_the_difference_per_producer(report: str) -> None:
    section = _section(report, 14)
    for mode in MODES:
        assert re.search(r"\| [\d.]+ \| [\d.]+ \| [+-][\d.]+ \| .+ \| .+ \|$", _row(section, mode))


def test_the_durable_store_has_a_judged_row_per_producer_and_the_fsync_rate(report: str) -> None:
    section = _section(report, 18)
    for producer in (*MODES, "prefilled drain"):
        row = _row(section, producer)
        ratio = r"[\d.]+ \((within|\*\*UNDER\*\*)\)"
        assert re.search(rf"\| {ratio} \| {ratio} \| [\d.]+ / [\d.]+ / [\d.]+ \|$", row), row
    assert re.search(r"\*\*\d+ per second\*\*", section)


def test_the_restart_row_has_its_time_and_bytes_per_queued_job(report: str) -> None:
    section = _section(report, 19)
    assert re.search(r"\| 200 \| 1,800 \| \d+ \| \d+ \| \d+ \| [\d.]+ \| (within|\*\*OVER\*\*) \|",
                     section), section  # fmt: skip
