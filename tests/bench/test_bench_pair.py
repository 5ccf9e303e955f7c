"""The paired A/B's arithmetic: ratios of medians and of pairs, and the verdict."""

from __future__ import annotations

from bench.pair import BlockRun, cpu_ratio, pooled_pairs, pooled_report, ratios, report

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
