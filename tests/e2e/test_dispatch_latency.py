"""The idle worker's dispatch latency, measured on each topology (issue 4's figure).

The figures go into the junit XML (record_property), the terminal summary,
and the assertion message; docs/testing.md keeps a table of them.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.api import Api
from tests.e2e.harness import Deployment
from tests.e2e.measure import dispatch_latency

P50_BOUND = 0.1
P99_BOUND = 0.5
RESULTS: dict[str, str] = {}


async def test_idle_worker_dispatch_latency(
    api: Api,
    model: str,
    deployment: Deployment,
    record_property: Callable[[str, object], None],
) -> None:
    latency = await dispatch_latency(api, model, samples=50)

    RESULTS[deployment.topology] = str(latency)
    record_property(f"dispatch_latency_{deployment.topology}", str(latency))
    assert latency.p50 < P50_BOUND and latency.p99 < P99_BOUND, f"{deployment.topology}: {latency}"
