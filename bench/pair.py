"""Paired end-to-end A/B of two checkouts: section 1's rows, each pair back to back.

Whole `bench.run --only e2e` runs of two trees, interleaved, drift apart
with the host (on two shared cores one tree's producer, the same code in
both, moved 1.2x between runs of one sitting). Here the unit is a block:
one topology at one worker concurrency, its three producers and then its
prefilled drain, with section 1's sizes. For each repetition and block the
two trees' blocks run back to back (about a minute apart), the order
alternating between repetitions, and each row's figure is the ratio of
medians and the median of the pairs' ratios.

    git worktree add --detach ../base fb35174 && make -C ../base venv
    python -m bench.pair --base-dir ../base --reps 5 --out bench/RESULTS-pair.md

On a host whose speed moves between runs, one sitting of five pairs may put
a row either side of the bound. `--pool FILE` reads back every table this
command wrote into a results file (the sittings headed `# Sitting N`, from
`--since` on) and gives each row the median of all its pairs across them:
the same pairing (both trees back to back), more pairs.

    python -m bench.pair --pool bench/RESULTS-ab-issue20.md --since 5

A long sitting: `--jsonl FILE` appends each block's figures as it ends,
`--minutes M` starts no repetition that the last one's length says would
end past M minutes, and `--from-jsonl FILE` reports the whole repetitions
of such a file (one cut short too) without running anything.

    python -m bench.pair --base-dir ../base --reps 20 --minutes 120 --jsonl /tmp/s.jsonl

Each block runs in its tree's own venv with that tree on PYTHONPATH, as a
script of bench APIs both trees have (BLOCK), so the base needs nothing of
this module.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.report import table

#: (topology, worker concurrency) of each block, in section 1's order.
BLOCKS: tuple[tuple[str, int], ...] = (("embedded", 1), ("embedded", 8), ("redis", 1), ("redis", 8))
PRODUCERS = ("1 Submit at a time", "32 Submits in flight", "BatchSubmit of 100", "drain")
TOPOLOGY_NAMES = {"embedded": "embedded", "redis": "redis (no persistence)"}

#: One block, run by a tree's own interpreter: prints {producer: [jobs/s, {process: CPU ms
#: a job}]} as JSON. Only names every tree since section 1 has (fb35174 on).
BLOCK = """
import json, sys
from bench import servers
from bench.e2e import BATCH, INFLIGHT, SEQUENTIAL, Run, drain, measure, ready_worker
from bench.sink import sink

topology_name, concurrency = sys.argv[1], int(sys.argv[2])
sizes = {SEQUENTIAL: (2000, {"inflight": 1}), INFLIGHT: (5000, {"inflight": 32}),
         BATCH: (5000, {"batch": 100})}
drain_jobs = 5000
out = {}
with sink() as timing:
    start = servers.on_redis(None) if topology_name == "redis" else servers.embedded()
    with start as topology:
        with ready_worker(topology, timing, "bench-e2e", concurrency) as pids:
            for producer, (jobs, options) in sizes.items():
                run = Run(topology.name, concurrency, producer)
                run = measure(topology, timing, pids, run, "bench-e2e", jobs, **options)
                out[producer] = [run.rate, {k: v / jobs * 1000 for k, v in run.cpu.items()}]
        run = drain(topology, timing, concurrency, drain_jobs)
        out["drain"] = [run.rate, {k: v / drain_jobs * 1000 for k, v in run.cpu.items()}]
print(json.dumps(out))
"""


@dataclass(frozen=True)
class BlockRun:
    """One tree's run of one block: jobs/s and CPU ms a job per process, by producer."""

    rep: int
    tree: str  # "base" or "head"
    block: tuple[str, int]
    rows: dict[str, tuple[float, dict[str, float]]]


def run_block(directory: Path, block: tuple[str, int]) -> dict[str, tuple[float, dict[str, float]]]:
    """The block in `directory`'s tree, with its own venv."""
    python = directory / ".venv" / "bin" / "python"
    env = {**os.environ, "PYTHONPATH": str(directory)}
    done = subprocess.run(
        [str(python), "-c", BLOCK, block[0], str(block[1])],
        cwd=directory, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    return {producer: (float(rate), cpu) for producer, (rate, cpu) in rows.items()}


def sitting(
    trees: dict[str, Path],
    reps: int,
    blocks: Sequence[tuple[str, int]] = BLOCKS,
    record: Callable[[BlockRun], None] = lambda run: None,
    minutes: float | None = None,
) -> list[BlockRun]:
    """`reps` repetitions; in each, every block by both trees back to back, the
    order alternating between repetitions. `record` sees each block run as it
    ends (a sitting cut short keeps what it ran). With `minutes`, no repetition
    starts that the last one's length says would end past that many minutes."""
    runs = []
    started = time.monotonic()
    for rep in range(1, reps + 1):
        rep_started = time.monotonic()
        for block in blocks:
            order = ["base", "head"] if rep % 2 else ["head", "base"]
            for tree in order:
                block_started = time.monotonic()
                run = BlockRun(rep, tree, block, run_block(trees[tree], block))
                runs.append(run)
                record(run)
                print(f"rep {rep} {block} {tree}: {time.monotonic() - block_started:.0f} s",
                      file=sys.stderr)  # fmt: skip
        last = time.monotonic() - rep_started
        if minutes is not None and time.monotonic() + last - started > minutes * 60:
            print(f"stopping after {rep} repetitions: another would pass {minutes:g} min",
                  file=sys.stderr)  # fmt: skip
            break
    return runs


def read_jsonl(text: str) -> list[BlockRun]:
    """The block runs `--jsonl` wrote, only of the repetitions whose every block both
    trees ran (a sitting cut inside a repetition would unbalance the medians)."""
    runs = []
    for line in text.splitlines():
        if line.strip():
            item = json.loads(line)
            rows = {name: (float(rate), cpu) for name, (rate, cpu) in item["rows"].items()}
            block = (str(item["block"][0]), int(item["block"][1]))
            runs.append(BlockRun(int(item["rep"]), str(item["tree"]), block, rows))
    blocks = {run.block for run in runs}
    ran: dict[int, set[tuple[str, tuple[str, int]]]] = {}
    for run in runs:
        ran.setdefault(run.rep, set()).add((run.tree, run.block))
    whole = {rep for rep, done in ran.items() if len(done) == 2 * len(blocks)}
    return [run for run in runs if run.rep in whole]


def ratios(
    runs: Sequence[BlockRun], block: tuple[str, int], producer: str
) -> tuple[list[float], list[float], float, float]:
    """The base's and head's jobs/s (in repetition order), head/base of the medians,
    and the median of the pairs' head/base ratios."""
    rates: dict[str, dict[int, float]] = {"base": {}, "head": {}}
    for run in runs:
        if run.block == block and producer in run.rows:
            rates[run.tree][run.rep] = run.rows[producer][0]
    base, head = rates["base"], rates["head"]
    paired = [head[rep] / base[rep] for rep in sorted(base) if rep in head and base[rep]]
    of_medians = statistics.median(head.values()) / statistics.median(base.values())
    return list(base.values()), list(head.values()), of_medians, statistics.median(paired)


def cpu_ratio(runs: Sequence[BlockRun], block: tuple[str, int], producer: str) -> float:
    """head/base of the median CPU ms a job, summed over the processes measured."""
    totals: dict[str, list[float]] = {"base": [], "head": []}
    for run in runs:
        if run.block == block and producer in run.rows:
            totals[run.tree].append(sum(run.rows[producer][1].values()))
    return statistics.median(totals["head"]) / statistics.median(totals["base"])


def report(runs: Sequence[BlockRun], bound: float, labels: dict[str, str]) -> list[str]:
    """Markdown: one line a row, its runs, both ratios and whether both are within."""
    cells = []
    within = 0
    for block in dict.fromkeys(run.block for run in runs):
        for producer in PRODUCERS:
            if not any(run.block == block and producer in run.rows for run in runs):
                continue
            base, head, of_medians, of_pairs = ratios(runs, block, producer)
            inside = min(of_medians, of_pairs) >= 1 - bound
            within += inside
            cells.append([
                f"{TOPOLOGY_NAMES[block[0]]} / {block[1]} / {producer}",
                _runs(base), _runs(head), f"{of_medians:.2f}", f"{of_pairs:.2f}",
                "within" if inside else "**outside**", f"{cpu_ratio(runs, block, producer):.2f}",
            ])  # fmt: skip
    header = ["jobs/s: row", f"base {labels['base']} (runs; median)",
              f"head {labels['head']} (runs; median)", "head/base, medians",
              "head/base, median of pairs", f"both within {bound:.0%}",
              "CPU a job, all processes, head/base (medians)"]  # fmt: skip
    return [*table(header, cells), "", f"{within} of {len(cells)} rows within by both ratios."]


def _runs(rates: list[float]) -> str:
    return ", ".join(f"{rate:.0f}" for rate in rates) + f"; **{statistics.median(rates):.0f}**"


#: A row of a table `report` wrote: the row's name, then each tree's runs in
#: repetition order ("503, 365; **434**").
_TABLE_ROW = re.compile(r"^\| ([^|]+ / \d+ / [^|]+) \| ([\d, ]+); \*\*\d+\*\* \| ([\d, ]+); ")
_SITTING = re.compile(r"^# Sitting (\d+)", re.MULTILINE)


def pooled_pairs(text: str, since: int = 0) -> dict[str, list[float]]:
    """Every row's head/base pairs from the tables of `text`'s sittings numbered
    `since` or later (a table before the first `# Sitting` heading counts as 0)."""
    pairs: dict[str, list[float]] = {}
    first, *rest = _SITTING.split(text)  # text, then (number, its text) per sitting
    sittings = [(0, first), *zip(map(int, rest[::2]), rest[1::2], strict=True)]
    for number, body in sittings:
        if number < since:
            continue
        for match in map(_TABLE_ROW.match, body.splitlines()):
            if match is None:
                continue
            base, head = ([float(rate) for rate in runs.split(",")] for runs in match.group(2, 3))
            pairs.setdefault(match.group(1).strip(), []).extend(
                h / b for b, h in zip(base, head, strict=True) if b
            )
    return pairs


def pooled_report(pairs: dict[str, list[float]], bound: float) -> list[str]:
    """Markdown: each row's pairs, their median and how many are within the bound."""
    cells = []
    within = 0
    for row, ratios_of_row in pairs.items():
        median = statistics.median(ratios_of_row)
        within += median >= 1 - bound
        inside = sum(ratio >= 1 - bound for ratio in ratios_of_row)
        cells.append([row, str(len(ratios_of_row)), f"{median:.2f}",
                      f"{inside} of {len(ratios_of_row)}"])  # fmt: skip
    header = ["jobs/s: row", "pairs", "head/base, median of all pairs",
              f"pairs within {bound:.0%}"]  # fmt: skip
    return [*table(header, cells), "",
            f"{within} of {len(cells)} rows within by the median of all pairs."]  # fmt: skip


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def _revision(directory: Path) -> str:
    done = subprocess.run(["git", "-C", str(directory), "rev-parse", "--short", "HEAD"],
                          check=True, capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-dir", type=Path, help="the other checkout, with .venv")
    parser.add_argument("--pool", type=Path, help="a results file: pool its sittings' pairs")
    parser.add_argument("--since", type=int, default=0, help="with --pool: from sitting N on")
    parser.add_argument("--head-dir", type=Path, default=Path.cwd(), help="default: this one")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--block", action="append", default=None,
                        help="TOPOLOGY:CONCURRENCY (embedded:1 ...), default all four")  # fmt: skip
    parser.add_argument("--bound", type=float, default=0.10, help="a row within 1 - bound")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    parser.add_argument("--jsonl", type=Path, default=None,
                        help="append each block's figures here, raw, as it ends")  # fmt: skip
    parser.add_argument("--minutes", type=float, default=None,
                        help="start no repetition that would end past this")  # fmt: skip
    parser.add_argument("--from-jsonl", type=Path, default=None,
                        help="report a --jsonl file's whole repetitions; run nothing")  # fmt: skip
    args = parser.parse_args()
    if args.pool:
        pairs = pooled_pairs(args.pool.read_text(), args.since)
        print("\n".join(pooled_report(pairs, args.bound)))
        return
    if args.base_dir is None:
        parser.error("--base-dir is required (or --pool)")
    trees = {"base": args.base_dir.resolve(), "head": args.head_dir.resolve()}
    labels = {name: _revision(directory) for name, directory in trees.items()}
    when = f"started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    blocks = BLOCKS
    if args.block:
        blocks = tuple((name, int(concurrency)) for name, concurrency in
                       (block.split(":") for block in args.block))  # fmt: skip
    if args.from_jsonl:
        runs = read_jsonl(args.from_jsonl.read_text())
        when = f"read from {args.from_jsonl}"
    else:
        runs = sitting(trees, args.reps, blocks, _appender(args.jsonl), args.minutes)
    reps = len({run.rep for run in runs})
    lines = [f"Paired A/B, {reps} repetitions, {when}; "
             f"base {labels['base']}, head {labels['head']}.", "",
             *report(runs, args.bound, labels), "",
             f"Command: `python -m bench.pair {' '.join(sys.argv[1:])}`; "
             f"load average at the end {_load()}."]  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


def _appender(path: Path | None) -> Callable[[BlockRun], None]:
    def append(run: BlockRun) -> None:
        if path is not None:
            with path.open("a") as out:
                out.write(json.dumps({"rep": run.rep, "tree": run.tree, "block": run.block,
                                      "rows": run.rows}) + "\n")  # fmt: skip

    return append


if __name__ == "__main__":
    main()
