"""The durable store's bench pieces (bench/durable.py): the fill, the restart probe, the rows."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.durable import (
    DONE_MODEL,
    QUEUED_MODEL,
    Restart,
    fill,
    fsyncs_per_second,
    restart_lines,
    throughput_lines,
    time_to_answers,
)
from bench.e2e import Run, Sizes
from bench.fairness import DRAIN, Sitting
from tests.store.durable import query

SIZES = Sizes(sequential_jobs=10, inflight_jobs=10, batch_jobs=10, drain_jobs=10,
              latency_rate=1, latency_seconds=1)  # fmt: skip
PRODUCERS = ("1 Submit at a time", "32 Submits in flight", "BatchSubmit of 100", DRAIN)


def test_the_fill_leaves_the_queued_and_the_completed_jobs_on_disk(tmp_path: Path) -> None:
    job_id, done_id, per_queued = asyncio.run(fill(tmp_path, queued=30, completed=150))
    statuses = dict(query(tmp_path, "SELECT model || ':' || status, count(*) FROM records "
                                    "GROUP BY model, status"))  # fmt: skip
    assert statuses == {f"{QUEUED_MODEL}:queued": 30, f"{DONE_MODEL}:completed": 150}
    assert query(tmp_path, "SELECT model FROM records WHERE id = ?", job_id) == [(QUEUED_MODEL,)]
    assert query(tmp_path, "SELECT model FROM records WHERE id = ?", done_id) == [(DONE_MODEL,)]
    assert per_queued > 1024  # the payload and then some


def test_a_restarted_serve_answers_a_get_of_a_queued_then_of_a_completed_job(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "data"
    job_id, done_id, _ = asyncio.run(fill(directory, queued=5, completed=5))
    first, finished = time_to_answers(directory, job_id, done_id)
    assert 0 < first <= finished < 60


def test_the_fsync_probe_counts_syncs_and_leaves_nothing_behind(tmp_path: Path) -> None:
    assert fsyncs_per_second(tmp_path, seconds=0.2) > 0
    assert list(tmp_path.iterdir()) == []


def _sitting(rates: dict[str, float]) -> Sitting:
    sitting = Sitting("embedded")
    for mode, rate in rates.items():
        for producer in PRODUCERS:
            run = Run("embedded", 8, producer, jobs=int(rate), seconds=1.0,
                      cpu={"serve": rate / 1000})  # fmt: skip
            sitting.runs[(mode, producer)] = [run]
    return sitting


def test_each_durable_mode_is_judged_against_in_memory_by_its_own_bound() -> None:
    sitting = _sitting({"in memory": 100, "normal": 79, "full": 50})
    lines = throughput_lines(sitting, SIZES, 1, fsyncs=1234)
    assert ("| 1 Submit at a time | 100 (median 100) | 79 (median 79) | 50 (median 50) "
            "| 0.79 (**UNDER**) | 0.50 (within) | 1.00 / 1.00 / 1.00 |") in lines  # fmt: skip
    assert sum(line.startswith(f"| {DRAIN} |") for line in lines) == 1
    assert any("**1234 per second**" in line for line in lines)


def test_a_restart_row_is_judged_by_the_ten_second_bound() -> None:
    rows = [Restart(100, 900, 1.0, 2048.4, 3 * 2**20, 9.5, 12.0),
            Restart(100, 900, 1.0, 2048.4, 3 * 2**20, 10.5, 12.25)]  # fmt: skip
    lines = restart_lines(rows)
    assert "| 100 | 900 | 3 | 2048 | 1 | 9.50 | within | 12.00 |" in lines
    assert "| 100 | 900 | 3 | 2048 | 1 | 10.50 | **OVER** | 12.25 |" in lines
