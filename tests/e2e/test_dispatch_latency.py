"""The idle worker's dispatch latency, measured on each topology (issue 4's figure).

The figures go into the junit XML (record_property), the terminal summary and
`timings`; their bounds (p50 < 100 ms, p99 < 500 ms after Submit returns) are
the bench's (bench/timing.py), never asserted here: a busy machine is slow,
not wrong. What is asserted, in every sample, is that the waiting claim got
the job just submitted. docs/testing.md keeps a table of the figures.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.api import Api
from tests.e2e.harness import Deployment
from tests.e2e.measure import Latency, dispatch_latency
from tests.timings import Timings

RESULTS: dict[str, str] = {}


def record(timings: Timings, latency: Latency, variant: str) -> None:
    timings("dispatch latency p50 (after Submit returns)", latency.p50, variant)
    timings("dispatch latency p99 (after Submit returns)", latency.p99, variant)


async def test_idle_worker_dispatch_latency(
    api: Api,
    model: str,
    deployment: Deployment,
    record_property: Callable[[str, object], None],
    timings: Timings,
) -> None:
    latency = await dispatch_latency(api, model, samples=50)

    RESULTS[deployment.topology] = str(latency)
    record_property(f"dispatch_latency_{deployment.topology}", str(latency))
    record(timings, latency, deployment.topology)
    # (dispatch_latency asserts, per sample, that the parked claim got the new job.)
