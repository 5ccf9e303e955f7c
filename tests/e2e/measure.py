"""Dispatch latency of an idle worker: Submit -> the waiting ClaimNext returns.

Two clocks per sample: from Submit *returning* (the issue's definition; it
can be ~0 when the claim is answered before the Submit reply arrives) and
from Submit being *sent* (what a caller waits end to end), plus the Submit
round trip itself for context.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

from jobgate.v1.worker_service_pb2 import ClaimedJob
from tests.e2e.api import Api

# A sample only counts when the claim was already waiting; this is how long we
# give it to park before the submit (asserted: it must not answer meanwhile).
PARK_TIME = 0.05


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p99: float

    @classmethod
    def of(cls, values: list[float]) -> Percentiles:
        return cls(statistics.median(values), percentile(values, 0.99))

    def __str__(self) -> str:
        return f"p50={self.p50 * 1000:.1f}ms p99={self.p99 * 1000:.1f}ms"


@dataclass(frozen=True)
class Latency:
    samples: int
    after_return: Percentiles
    from_send: Percentiles
    submit_rtt: Percentiles

    @property
    def p50(self) -> float:
        return self.after_return.p50

    @property
    def p99(self) -> float:
        return self.after_return.p99

    def __str__(self) -> str:
        return (
            f"n={self.samples} after Submit returns: {self.after_return}; "
            f"from Submit sent: {self.from_send}; Submit round trip: {self.submit_rtt}"
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
    after_return: list[float] = []
    from_send: list[float] = []
    submit_rtt: list[float] = []

    async def timed_claim() -> tuple[list[ClaimedJob], float]:
        claimed = await worker.claim([model], wait=10.0)
        return claimed, time.perf_counter()

    for index in range(samples):
        waiting = asyncio.create_task(timed_claim())
        done, _ = await asyncio.wait({waiting}, timeout=PARK_TIME)
        assert not done, "the claim answered before any job was submitted"
        sent = time.perf_counter()
        job = await api.submit(model, str(index).encode())
        returned = time.perf_counter()
        claimed, claimed_at = await waiting
        after_return.append(max(0.0, claimed_at - returned))
        from_send.append(claimed_at - sent)
        submit_rtt.append(returned - sent)
        assert [c.job.id for c in claimed] == [job.id]
        await worker.complete(job.id, claimed[0].lease_id)
    return Latency(
        samples,
        Percentiles.of(after_return),
        Percentiles.of(from_send),
        Percentiles.of(submit_rtt),
    )
