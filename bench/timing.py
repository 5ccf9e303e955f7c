"""Section 11: the durations the tests measure, held to their bounds here.

No test asserts a bound on a latency, a rate or a duration (a busy CI
machine would fail it, as the tenant-flood p50 did on 2026-12-02); a test
that times something hands the figure to its `timings` fixture
(tests/timings.py) and keeps only the checks that cannot flake. This
section runs those tests (pytest `-m timing`, which the fixture marks) with
`--timings`, reads the figures and prints each against its bound from
BOUNDS below, with the verdict. A bound names what it guards; the old
assertion's threshold is kept, so a figure over its bound here is what used
to fail the test. docs/testing.md lists which test's bound went where.

The section reports; it does not fail the run (a figure OVER on a loaded
machine is read like any other benchmark figure: run it again quiet).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import table
from tests.timings import TIMINGS_ENV, Timing, read

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Bound:
    """At most `seconds`, or the first `by_variant` entry whose key starts the variant."""

    seconds: float
    why: str
    by_variant: Mapping[str, float] = field(default_factory=dict)

    def limit(self, variant: str) -> float:
        return next(
            (value for prefix, value in self.by_variant.items() if variant.startswith(prefix)),
            self.seconds,
        )


@dataclass(frozen=True)
class Relative:
    """A figure at most max(`factor` x its baseline, baseline + `slack`), where the
    baseline is the same test's figure of this check with variant `baseline`."""

    baseline: str
    factor: float
    slack: float
    why: str


#: The bound of each check the tests record (the old assertion's threshold).
BOUNDS: dict[str, Bound | Relative] = {
    "store down: call fails": Bound(
        1.0,
        "DESIGN: Redis down is UNAVAILABLE within a second, never a hang",
        {"servers": 2.0, "Sentinel": 1.5, "Cluster": 2.5},
    ),
    "store down: a hung Redis fails the call": Bound(
        2.0, "the 1 s socket timeout, not a hang", {"RedisStore Get": 2.5}
    ),
    "wake-up: a waiting claim answers a new job": Bound(
        1.0, "pushed by the notification, not found by a re-check", {"Cluster": 2.0}
    ),
    "wake-up: the claim after an abandoned poll": Bound(
        1.0, "the abandoned poll gave its job back at once"
    ),
    "dispatch latency p50 (after Submit returns)": Bound(
        0.1, "a broken wake-up (a fallback to polling) shows here"
    ),
    "dispatch latency p99 (after Submit returns)": Bound(
        0.5, "a broken wake-up (a fallback to polling) shows here"
    ),
    "long poll: an empty answer past its wait": Bound(
        2.5, "an empty answer comes when the wait ends", {"store": 2.7}
    ),
    "long poll: wait 0 answers": Bound(1.0, "wait 0 does not wait"),
    "lease recovery: requeued past the lease": Bound(
        2.0, "DESIGN: recovery acts within about a second of the expiry"
    ),
    "worker SIGKILL: recovery p99 past the lease": Bound(
        2.0, "a dead worker's jobs run again about a second after the lease"
    ),
    "drain: exit past the grace period": Bound(1.0, "DESIGN: SIGTERM drains within the grace"),
    "drain: a long poll answers empty": Bound(2.0, "a drain ends a long poll at once"),
    "failover: Submit serving again": Bound(30.0, "the failover completes and the servers follow"),
    "heartbeat: the median gap off a third of the lease": Bound(
        0.1, "beats every third of the lease, even beside a CPU-bound handler"
    ),
    "heartbeat: the longest gap, lease 0.9 s": Bound(
        0.6, "no gap comes near losing the lease (2/3 of it)"
    ),
    "heartbeat: a failed call retried, lease 0.9 s": Bound(
        0.3, "a failed beat is retried sooner than the usual third of the lease"
    ),
    "worker stop: an idle daemon stops": Bound(2.0, "a stop does not wait out the long poll"),
    "client: a retry past the deadline gives up": Bound(
        2.0, "no sleep past the deadline (the server asked for 5 s)"
    ),
    "client: a call ends past its deadline": Bound(1.0, "the deadline covers every attempt"),
    "audit log: a stop ends a blocked read": Bound(1.0, "a stop does not wait out the read"),
    "jobgate events: an unreachable Redis is an error": Bound(10.0, "one line and exit 1"),
    "tenant flood: the calm tenant's Submit p50": Relative(
        "quiet", 1.10, 0.0005, "a flood at many times its quota leaves another tenant's latency"
    ),
}

#: The tests the quick run times (seconds in all): enough to prove the section works.
QUICK_TESTS = ("tests/worker/test_daemon_timing.py", "tests/client/test_retry.py")


@dataclass(frozen=True)
class Verdict:
    timing: Timing
    limit: float | None  # None: no bound (a baseline, or a check BOUNDS lacks)
    why: str

    @property
    def within(self) -> bool | None:
        return None if self.limit is None else self.timing.seconds <= self.limit


def verdicts(recorded: Sequence[Timing]) -> list[Verdict]:
    """Each figure against its bound, in the order the tests recorded them."""
    found = []
    for timing in recorded:
        bound = BOUNDS.get(timing.check)
        if bound is None:
            found.append(Verdict(timing, None, "no bound in bench/timing.py"))
        elif isinstance(bound, Bound):
            found.append(Verdict(timing, bound.limit(timing.variant), bound.why))
        elif timing.variant == bound.baseline:
            found.append(Verdict(timing, None, "the baseline"))
        else:
            base = next(
                (t.seconds for t in recorded
                 if (t.check, t.test, t.variant) == (timing.check, timing.test, bound.baseline)),
                None,
            )  # fmt: skip
            limit = None if base is None else max(base * bound.factor, base + bound.slack)
            rule = f"at most max({bound.factor:g} x {bound.baseline}, +{bound.slack * 1e3:g} ms)"
            found.append(Verdict(timing, limit, f"{bound.why} ({rule})"))
    return found


def _cell(verdict: Verdict) -> str:
    if verdict.within is None:
        return "-"
    return "within" if verdict.within else "**OVER**"


def timing_lines(found: Sequence[Verdict], pytest_line: str, command: str) -> list[str]:
    rows = [
        [v.timing.check, v.timing.variant or "-", f"{v.timing.seconds * 1e3:.1f}",
         "-" if v.limit is None else f"{v.limit * 1e3:.0f}", _cell(v), v.why,
         f"`{v.timing.test}`"]
        for v in found
    ]  # fmt: skip
    checked = [v for v in found if v.within is not None]
    over = [v for v in checked if not v.within]
    unmeasured = sorted(set(BOUNDS) - {v.timing.check for v in found})
    header = ["check", "variant", "measured ms", "bound ms", "verdict", "what it guards", "test"]
    lines = ["## 11. Timing bounds: the durations the tests measure (bench/timing.py)", "",
             *table(header, rows), "",
             f"{len(checked) - len(over)} of {len(checked)} figures within their bounds"
             + (f"; over: {', '.join(sorted({v.timing.check for v in over}))}" if over else "")
             + f". The tests, run as `{command}`: {pytest_line}"]  # fmt: skip
    if unmeasured:
        lines[-1] += f". Not measured in this run: {'; '.join(unmeasured)}"
    return [*lines, ""]


def measure(paths: Sequence[str]) -> tuple[list[Timing], str, str]:
    """Run the timing tests under `paths`: their figures, pytest's last line, the command."""
    with tempfile.TemporaryDirectory(prefix="jobgate-timing-") as workdir:
        out = Path(workdir) / "timings.json"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-m", "timing", *paths]  # fmt: skip
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True,
            env={**os.environ, TIMINGS_ENV: str(out)},
        )  # fmt: skip
        last = next((line for line in reversed(done.stdout.splitlines()) if line.strip()), "")
        recorded = read(out) if out.exists() else []
    shown = " ".join(["python -m pytest -q -m timing", *paths])
    return recorded, last.strip("= "), shown
