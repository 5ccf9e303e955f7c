"""Durations the tests measure but never assert: the benchmark holds their bounds.

A test that times something (a wake-up, a fail-fast, a drain, a recovery, a
latency) hands the figure to the `timings` fixture instead of asserting a
bound on it, so a busy machine can slow a test down but never fail it; the
test keeps the checks that cannot flake (the answer, the refusal, nothing
lost, the order). The figures are printed at the end of the run and, with
`--timings PATH` (or JOBGATE_TIMINGS), written as JSON. `python -m bench.run
--only timing` runs the tests marked `timing` with that option and checks
each figure against its bound (bench/timing.py `BOUNDS`, keyed by `check`);
docs/testing.md lists which test's bound went where.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

#: The environment variable naming the JSON file (the bench sets it).
TIMINGS_ENV = "JOBGATE_TIMINGS"


@dataclass(frozen=True)
class Timing:
    """One measured duration: which bound it answers to, from which test."""

    #: The bound's name in bench/timing.py BOUNDS.
    check: str
    seconds: float
    #: The pytest node id that measured it.
    test: str
    #: What the bound is applied to, when one check is measured several ways
    #: (a topology, an RPC, a fault).
    variant: str = ""


class Timings:
    """The `timings` fixture: `timings(check, seconds, variant="")` records one figure."""

    def __init__(self, test: str, recorded: list[Timing]) -> None:
        self._test = test
        self._recorded = recorded

    def __call__(self, check: str, seconds: float, variant: str = "") -> None:
        self._recorded.append(Timing(check, float(seconds), self._test, variant))


def summary_lines(recorded: list[Timing]) -> list[str]:
    return [
        f"{t.check}{f' [{t.variant}]' if t.variant else ''}: {t.seconds * 1e3:.1f} ms ({t.test})"
        for t in recorded
    ]


def write(recorded: list[Timing], path: Path) -> None:
    path.write_text(json.dumps([asdict(t) for t in recorded], indent=1) + "\n")


def read(path: Path) -> list[Timing]:
    return [Timing(**entry) for entry in json.loads(path.read_text())]
