"""Dispatch latency of an idle worker: Submit returns -> the waiting ClaimNext returns."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

from tests.e2e.api import Api

# A sample only counts when the claim was already waiting; this is how long we
# give it to park before the submit. (If it parked later, the claim would find
# the job at once, which would only flatter the figure, so we check it.)
PARK_TIME = 0.05


@dataclass(frozen=True)
class Latency:
    samples: int
    p50: float
    p99: float
    max: float

    def __str__(self) -> str:
        return (
            f"n={self.samples} p50={self.p50 * 1000:.1f}ms "
            f"p99={self.p99 * 1000:.1f}ms max={self.max * 1000:.1f}ms"
        )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


async def dispatch_latency(
    api: Api, model: str, samples: int = 50, worker: Api | None = None
) -> Latency:
    """Submit through `api`; claim through `worker` (default: `api`'s own worker service)."""
    worker = worker or api
    latencies: list[float] = []
    for index in range(samples):
        waiting = asyncio.create_task(worker.claim([model], wait=10.0))
        done, _ = await asyncio.wait({waiting}, timeout=PARK_TIME)
        assert not done, "the claim answered before any job was submitted"
        job = await api.submit(model, str(index).encode())
        submitted = time.perf_counter()
        claimed = await waiting
        latencies.append(time.perf_counter() - submitted)
        assert [c.job.id for c in claimed] == [job.id]
        await worker.complete(job.id, claimed[0].lease_id)
    return Latency(
        samples,
        statistics.median(latencies),
        percentile(latencies, 0.99),
        max(latencies),
    )
