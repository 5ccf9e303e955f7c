"""The paired A/B's arithmetic: ratios of medians and of pairs, and the verdict."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from bench import pair
from bench.pair import (
    BlockRun,
    cpu_ratio,
    pooled_pairs,
    pooled_report,
    ratios,
    read_jsonl,
    report,
    sitting,
)

BLOCK = ("redis", 8)
ROW = "BatchSubmit of 100"


def _runs(base: list[float], head: list[float]) -> list[BlockRun]:
    runs = []
    for rep, (b, h) in enumerate(zip(base, head, strict=True), start=1):
        runs.append(BlockRun(rep, "base", BLOCK, {ROW: (b, {"serve": 1.0})}))
        runs.append(BlockRun(rep, "head", BLOCK, {ROW: (h, {"serve": 1.0 * b / h})}))
    return runs


def test_ratios_compare_medians_and_pairs() -> None:
    runs = _runs([100, 200, 300], [90, 220, 240])

    base, head, of_medians, of_pairs = ratios(runs, BLOCK, ROW)

    assert base == [100, 200, 300] and head == [90, 220, 240]
    assert of_medians == 220 / 200
    assert of_pairs == 0.9  # the pairs: 0.9, 1.1, 0.8


def test_a_row_is_within_only_when_both_ratios_are() -> None:
    runs = _runs([100, 200, 300], [90, 220, 240])
    lines = report(runs, 0.05, {"base": "a", "head": "b"})

    assert "**outside**" in lines[2]
    assert lines[-1] == "0 of 1 rows within by both ratios."


def test_cpu_ratio_compares_the_median_cpu_a_job() -> None:
    runs = _runs([100, 100, 100], [50, 50, 50])  # head uses twice the CPU a job

    assert cpu_ratio(runs, BLOCK, ROW) == 2.0


_RESULTS = """\
| jobs/s: row | base a (runs; median) | head b (runs; median) | ... |
| --- | --- | --- | --- |
| redis / 8 / drain | 100, 200; **150** | 50, 50; **50** | 0.33 |

# Sitting 2: the first one pooled

| redis / 8 / drain | 100, 200, 400; **200** | 90, 220, 360; **220** | 1.10 |
| embedded / 1 / drain | 100; **100** | 120; **120** | 1.20 |

# Sitting 3

| redis / 8 / drain | 100, 100; **100** | 80, 95; **88** | 0.88 |
"""


def test_pooled_pairs_gather_each_rows_pairs_from_the_sittings_asked_for() -> None:
    pairs = pooled_pairs(_RESULTS, since=2)

    assert pairs == {"redis / 8 / drain": [0.9, 1.1, 0.9, 0.8, 0.95],
                     "embedded / 1 / drain": [1.2]}  # fmt: skip


def test_pooled_report_judges_a_row_by_the_median_of_all_its_pairs() -> None:
    lines = pooled_report({"redis / 8 / drain": [0.9, 1.1, 0.9, 0.8, 0.95]}, 0.10)

    assert lines[2] == "| redis / 8 / drain | 5 | 0.90 | 4 of 5 |"
    assert lines[-1] == "1 of 1 rows within by the median of all pairs."


def _line(rep: int, tree: str, block: tuple[str, int]) -> str:
    return json.dumps({"rep": rep, "tree": tree, "block": block, "rows": {ROW: [100.0, {}]}})


def test_read_jsonl_keeps_only_repetitions_both_trees_ran_whole() -> None:
    other = ("embedded", 1)
    lines = [_line(1, tree, block) for block in (BLOCK, other) for tree in ("base", "head")]
    lines += [_line(2, "head", BLOCK), _line(2, "base", BLOCK)]  # cut before `other`

    runs = read_jsonl("\n".join(lines) + "\n")

    assert {run.rep for run in runs} == {1}
    assert len(runs) == 4 and runs[0].block == BLOCK and runs[0].rows[ROW] == (100.0, {})


def test_sitting_records_each_block_as_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pair, "run_block", lambda directory, block: {ROW: (1.0, {})})
    seen: list[BlockRun] = []

    runs = sitting({"base": Path("a"), "head": Path("b")}, 2, [BLOCK], seen.append)

    assert seen == runs
    assert [(run.rep, run.tree) for run in seen] == [(1, "base"), (1, "head"),
                                                     (2, "head"), (2, "base")]  # fmt: skip


def test_sitting_starts_no_repetition_past_its_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]

    def run_block(directory: Path, block: tuple[str, int]) -> dict[str, Any]:
        now[0] += 60.0  # a block run takes a minute: a repetition two
        return {ROW: (1.0, {})}

    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setattr(pair, "run_block", run_block)

    runs = sitting({"base": Path("a"), "head": Path("b")}, 10, [BLOCK], minutes=7)

    assert {run.rep for run in runs} == {1, 2, 3}  # a fourth would end at 8 minutes
