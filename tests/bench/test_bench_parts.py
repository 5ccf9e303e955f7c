"""The benchmark's pieces that need no servers: /proc reading, summaries, failure reports."""

from __future__ import annotations

import ast
import os
from collections import Counter
from pathlib import Path

import pytest

from bench import run
from bench.commandstats import describe, per_job
from bench.e2e import Run, Sizes, TopologyFigures
from bench.fairness import Sitting, command_difference, command_lines, throughput_lines
from bench.procstat import cpu_seconds, rss_and_threads
from bench.roundtrips import Trips
from bench.sink import Sink
from bench.spread import Case, Comparison, Probe, spread_lines
from bench.timing import BOUNDS, timing_lines, verdicts
from bench.under_load import LoadState
from tests.redis_server import require_redis_server
from tests.timings import Timing


def test_proc_figures_of_this_process_are_read() -> None:
    sum(range(100_000))  # some CPU, so the figure cannot be zero
    rss, threads = rss_and_threads(os.getpid())
    assert cpu_seconds(os.getpid()) > 0
    assert rss > 0 and threads >= 1


def test_commands_per_job_are_the_delta_over_the_jobs() -> None:
    before = Counter({"evalsha": 10, "hset": 4})
    after = Counter({"evalsha": 16, "hset": 10, "publish": 2})
    assert per_job(before, after, 2) == {"evalsha": 3.0, "hset": 3.0, "publish": 1.0}


def test_description_gives_the_total_then_the_scripts_run() -> None:
    text = describe({"hset": 6.0, "evalsha": 3.0, "publish": 1.0})
    assert text == "10.0; evalsha 3.00; hset 6.00, publish 1.00"


def _redis_figures() -> list[TopologyFigures]:
    topology = "redis (no persistence)"
    produced = Run(topology, 1, "1 Submit at a time", jobs=1000, seconds=2.0,
                   cpu={"producer": 1.0, "gateway": 2.0, "redis": 0.5},
                   commands={"evalsha": 2.0})  # fmt: skip
    drained = Run(topology, 8, "prefilled drain of 2000", jobs=2000, seconds=1.0,
                  cpu={"gateway": 0.2, "worker-server": 1.0, "redis": 0.4, "worker": 3.0},
                  commands={"evalsha": 1.5, "hset": 1.0})  # fmt: skip
    return [TopologyFigures(runs=[produced], drains=[drained])]


def test_drains_get_cpu_rows_after_the_producer_runs_without_a_producer_figure() -> None:
    lines = run._cpu_lines(_redis_figures())
    assert lines.index("| redis (no persistence) | 1 | 1 Submit at a time "
                       "| 1.00 | 2.00 | - | - | - | 0.50 | gateway |") < lines.index(
        "| redis (no persistence) | 8 | prefilled drain of 2000 "
        "| - | 0.10 | 0.50 | - | 1.50 | 0.20 | worker |")  # fmt: skip


def test_drains_get_redis_commands_per_job_rows() -> None:
    lines = run._commands_lines(_redis_figures())
    assert "| 8 | prefilled drain of 2000 | 2.5; evalsha 1.50; hset 1.00 |" in lines


def test_round_trips_give_commands_per_call_and_per_job() -> None:
    trips = {
        "SetResult": Trips({"EVALSHA": 1.0}),
        "BatchSubmit of 100": Trips({"EVALSHA": 1.0, "XREAD": 0.5}, jobs=100),
    }
    lines = run._trips_lines(trips)
    assert "| RPC | commands per call | jobs per call | commands per job |" in "\n".join(lines)
    assert "| SetResult | 1.00 | 1 | 1.000 | EVALSHA 1.00 |" in lines
    assert "| BatchSubmit of 100 | 1.50 | 100 | 0.015 | EVALSHA 1.00, XREAD 0.50 |" in lines


def test_load_rows_are_labelled_by_topology_with_each_server_process_or_a_dash() -> None:
    states = [
        LoadState("embedded", "idle", {"serve": (50 * 2**20, 9)}, [0.001]),
        LoadState("embedded", "100 streams + 20 long-polls", {"serve": (60 * 2**20, 9)},
                  [0.002], retried_opens=3),
        LoadState("redis (no persistence)", "100 streams + 20 long-polls",
                  {"gateway": (70 * 2**20, 9), "worker-server": (55 * 2**20, 8)}, [0.003]),
    ]  # fmt: skip
    lines = run._load_lines(states, run.QUICK)
    assert "| embedded | idle | - | - | - | - | 50 | 9 | 1.00 | 1.00 | 1.00 | 1.00 |" in lines
    assert ("| redis (no persistence) | 100 streams + 20 long-polls | 70 | 9 | 55 | 8 | - | - "
            "| 3.00 | 3.00 | 3.00 | 3.00 |") in lines  # fmt: skip
    assert "retried: embedded 3, redis (no persistence) 0." in lines[-2]


@pytest.mark.redis
def test_a_failed_section_is_reported_and_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    require_redis_server()

    def broken(plan: run.Plan, timing: Sink) -> list[str]:
        raise RuntimeError("no luck")

    monkeypatch.setitem(run.SECTIONS, "broken", broken)
    out = tmp_path / "report.md"
    lines, ok = run.run(run.QUICK, "test", "", ["broken"], out)
    assert not ok
    assert "`RuntimeError: no luck`" in lines
    assert "## broken: failed" in out.read_text()


def _timing(check: str, seconds: float, variant: str = "", test: str = "t::a") -> Timing:
    return Timing(check, seconds, test, variant)


def test_a_timing_is_held_to_its_bound_or_its_variants() -> None:
    check = "store down: call fails"
    found = verdicts([_timing(check, 1.5, "RedisStore, stopped"), _timing(check, 1.5, "servers")])
    assert [(v.limit, v.within) for v in found] == [(1.0, False), (2.0, True)]


def test_a_relative_bound_is_taken_from_the_same_tests_baseline() -> None:
    check = "tenant flood: the calm tenant's Submit p50"
    quiet, flooded = _timing(check, 0.010, "quiet"), _timing(check, 0.0105, "flooded")
    other_test = _timing(check, 0.001, "quiet", test="t::b")
    found = verdicts([quiet, other_test, flooded])
    assert [v.within for v in found] == [None, None, True]
    assert found[2].limit == pytest.approx(0.011)


def test_a_timing_without_a_bound_is_shown_not_judged() -> None:
    [verdict] = verdicts([_timing("no such check", 0.1)])
    assert verdict.within is None and "no bound" in verdict.why


def test_the_timing_section_counts_what_is_over_and_names_what_was_not_measured() -> None:
    check = "worker stop: an idle daemon stops"
    lines = timing_lines(verdicts([_timing(check, 3.0)]), "1 passed", "pytest")
    assert "| worker stop: an idle daemon stops | - | 3000.0 | 2000 | **OVER** |" in "\n".join(
        lines
    )
    summary = lines[-2]
    assert summary.startswith("0 of 1 figures within their bounds; over: " + check)
    assert "Not measured in this run: " in summary and "store down: call fails" in summary


def test_every_check_the_tests_record_has_a_bound() -> None:
    # The check names are string constants at each `timings(...)` call in tests/.
    names: set[str] = set()
    for path in (Path(__file__).resolve().parents[1]).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "timings"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
    assert names and names <= set(BOUNDS), sorted(names - set(BOUNDS))
    assert set(BOUNDS) <= names, sorted(set(BOUNDS) - names)


def test_a_spread_case_takes_its_tenants_and_pools_in_turn() -> None:
    tenants, pools = Case("3 tenants", 3, 0), Case("2 pools", 1, 2)
    assert [tenants.tenant(turn) for turn in range(4)] == [
        "bench-0",
        "bench-1",
        "bench-2",
        "bench-0",
    ]
    assert [tenants.pool(turn) for turn in range(2)] == ["", ""]
    assert [pools.pool(turn) for turn in range(3)] == ["p0", "p1", "p0"]


def test_a_spread_comparison_gives_each_deployment_a_row_and_the_ratio_its_verdict() -> None:
    spread = Probe(Case("10 pools x 10", 1, 10), 100, submit=[0.0013], claim=[0.0030])
    single = Probe(Case("1 pool x 100", 1, 1), 100, submit=[0.0010], claim=[0.0020])
    lines = spread_lines([Comparison("embedded", "pools", spread, single)], 20)
    assert "| embedded | 10 pools x 10 | 100 | 1.30 / 1.30 | 3.00 / 3.00 |" in lines
    assert (
        "| embedded | 10 pools x 10 / 1 pool x 100 |  | 1.30x **OVER** | 1.50x **OVER** |" in lines
    )


SIZES = Sizes(sequential_jobs=10, inflight_jobs=10, batch_jobs=10, drain_jobs=10,
              latency_rate=1, latency_seconds=1)  # fmt: skip


def _sitting(rates: dict[str, list[float]], commands: dict[str, dict[str, float]]) -> Sitting:
    sitting = Sitting("redis (no persistence)")
    for mode, mode_rates in rates.items():
        for producer in ("1 Submit at a time", "32 Submits in flight", "BatchSubmit of 100"):
            sitting.runs[(mode, producer)] = [
                Run(
                    "redis",
                    8,
                    producer,
                    jobs=int(rate),
                    seconds=1.0,
                    commands=commands[mode],
                    cpu={"gateway": rate / 1000, "redis": rate / 1000, "producer": 1.0},
                )
                for rate in mode_rates
            ]
    return sitting


def test_fair_share_rows_compare_the_medians_of_interleaved_runs() -> None:
    sitting = _sitting({"tenant": [80, 95, 90], "off": [100, 90, 120]}, {"tenant": {}, "off": {}})
    lines = throughput_lines([sitting], SIZES, 3)
    assert ("| redis (no persistence) | 1 Submit at a time | 80, 95, 90 (median 90) "
            "| 100, 90, 120 (median 100) | 0.90 | within | 2.00 / 2.00 |") in lines  # fmt: skip


def test_the_command_difference_names_each_command_added_and_removed() -> None:
    on = {"evalsha": 2.0, "hmget": 1.0, "hset": 2.0, "get": 0.01}
    off = {"evalsha": 2.0, "get": 1.0, "set": 1.0, "hset": 1.02}
    assert command_difference(on, off) == ("hmget +1.00, hset +0.98", "set -1.00, get -0.99")


def test_fair_share_command_rows_come_from_redis_runs_only() -> None:
    on, off = {"evalsha": 2.0, "hmget": 1.0}, {"evalsha": 2.0}
    redis = _sitting({"tenant": [1], "off": [1]}, {"tenant": on, "off": off})
    embedded = _sitting({"tenant": [1], "off": [1]}, {"tenant": {}, "off": {}})
    lines = command_lines([redis, embedded], SIZES)
    assert "| 1 Submit at a time | 3.0 | 2.0 | +1.00 | hmget +1.00 | none |" in lines
    assert sum(line.startswith("| ") for line in lines) == 2 + 3  # header, rule, 3 Redis rows
