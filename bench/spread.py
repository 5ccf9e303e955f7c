"""Submit and claim against many tenants or many pools (issue 19, part 5).

Each comparison puts the same number of queued jobs on two deployments that
differ in one way: 1,000 tenants x 100 queued against one tenant with
100,000 (fair share on: every tenant has a pass of its own), or jobs bound to
ten pools against one pool. Both deployments are filled first (Redis through
the submit script, pipelined, as bench/depth.py; the embedded store through
BatchSubmit), then probed in alternating rounds so the machine's drift falls
on both alike: Submits (each from the next tenant, bound to the next pool),
then ClaimNext calls (each for the next pool). DESIGN's claim is O(log N) in
queued jobs and O(log T) in tenants, and a claim reads two queues whatever the
pools, so each pair's p50s should agree within 1.2x.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

import grpc

from bench import servers
from bench.depth import PAYLOAD, WARMUP_CALLS, BulkFiller
from bench.report import ms, percentile, table
from bench.servers import Topology
from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from store.model import JobSpec, SubmitRequest

MODEL = "bench-spread"
ROUNDS = 4  # alternating probe rounds per comparison
BOUND = 1.2
BATCH = 1000  # jobs per BatchSubmit when filling the embedded store


@dataclass(frozen=True)
class Case:
    """How one deployment's queued jobs are spread: over `tenants` x `pools` classes."""

    label: str
    tenants: int
    pools: int  # 0: no pool (any-pool jobs, claims naming none)

    def tenant(self, turn: int) -> str:
        return f"bench-{turn % self.tenants}"

    def pool(self, turn: int) -> str:
        return f"p{turn % self.pools}" if self.pools else ""


@dataclass
class Probe:
    case: Case
    queued: int
    submit: list[float] = field(default_factory=list)
    claim: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Comparison:
    store: str
    what: str
    spread: Probe  # many tenants or ten pools
    single: Probe  # one tenant or one pool

    def ratio(self, kind: str) -> float:
        def p50(probe: Probe) -> float:
            return percentile(getattr(probe, kind), 0.5)

        return p50(self.spread) / p50(self.single)


def comparisons(jobs: int, tenants: int) -> list[tuple[str, Case, Case]]:
    """(what, spread case, single case): the tenants pair and the pools pair."""
    per = max(1, jobs // tenants)
    return [
        (
            "tenants",
            Case(f"{tenants:,} tenants x {per:,}", tenants, 0),
            Case(f"1 tenant x {per * tenants:,}", 1, 0),
        ),
        ("pools", Case(f"10 pools x {jobs // 10:,}", 1, 10), Case(f"1 pool x {jobs:,}", 1, 1)),
    ]


def _request(case: Case, turn: int) -> SubmitRequest:
    spec = JobSpec(model=MODEL, payload=PAYLOAD, pool=case.pool(turn))
    return SubmitRequest(tenant=case.tenant(turn), work=spec)


async def fill_redis(topology: Topology, case: Case, jobs: int) -> None:
    """`jobs` queued in turn over the case's tenants and pools (the submit script)."""
    assert topology.redis is not None
    classes = max(case.tenants, case.pools, 1)
    filler = BulkFiller(topology.redis.url, [_request(case, turn) for turn in range(classes)])
    try:
        if await filler.fill(jobs, time.monotonic() + 1800) < jobs:
            raise RuntimeError(f"filling {case.label} stopped short")
    finally:
        await filler.close()


async def fill_embedded(jobs: job_service_pb2_grpc.JobServiceAsyncStub, case: Case, n: int) -> None:
    """`n` jobs through BatchSubmit: each tenant's share in its own calls."""
    per_tenant = n // case.tenants
    for index in range(case.tenants):
        tenant = case.tenant(index)
        for first in range(0, per_tenant, BATCH):
            items = [
                job_service_pb2.SubmitRequest(
                    job=job_pb2.JobSpec(model=MODEL, payload=PAYLOAD, pool=case.pool(turn))
                )
                for turn in range(first, min(per_tenant, first + BATCH))
            ]
            await jobs.BatchSubmit(
                job_service_pb2.BatchSubmitRequest(requests=items),
                metadata=(("x-jobgate-tenant", tenant),),
                timeout=120,
            )


class Stubs:
    """A deployment's two services, and the leases its probe claims hold."""

    def __init__(self, topology: Topology) -> None:
        self.channels = [
            grpc.aio.insecure_channel(topology.job_target),
            grpc.aio.insecure_channel(topology.worker_target),
        ]
        self.jobs = job_service_pb2_grpc.JobServiceStub(self.channels[0])
        self.workers = worker_service_pb2_grpc.WorkerServiceStub(self.channels[1])
        self.claimed: list[worker_service_pb2.ClaimedJob] = []

    async def close(self) -> None:
        for claimed in self.claimed:  # off the clock, so the depth stays as filled
            await self.workers.SetResult(
                worker_service_pb2.SetResultRequest(
                    job_id=claimed.job.id,
                    lease_id=claimed.lease_id,
                    status=job_pb2.JOB_STATUS_COMPLETED,
                )
            )
        for channel in self.channels:
            await channel.close(None)


async def _timed(calls: int, call: Callable[[int], Awaitable[None]], into: list[float]) -> None:
    for turn in range(calls):
        started = time.perf_counter()
        await call(turn)
        into.append(time.perf_counter() - started)


async def probe_round(stubs: Stubs, probe: Probe, calls: int, kept: bool = True) -> None:
    """`calls` Submits, then `calls` ClaimNext; the samples kept unless a warm-up."""
    case = probe.case

    async def submit(turn: int) -> None:
        spec = job_pb2.JobSpec(model=MODEL, payload=PAYLOAD, pool=case.pool(turn))
        await stubs.jobs.Submit(
            job_service_pb2.SubmitRequest(job=spec),
            metadata=(("x-jobgate-tenant", case.tenant(turn)),),
        )

    async def claim(turn: int) -> None:
        request = worker_service_pb2.ClaimNextRequest(
            worker_id="bench-spread", models=[MODEL], pool=case.pool(turn)
        )
        stubs.claimed.extend((await stubs.workers.ClaimNext(request)).jobs)

    await _timed(calls, submit, probe.submit if kept else [])
    await _timed(calls, claim, probe.claim if kept else [])


@contextlib.contextmanager
def two(
    start: Callable[[], contextlib.AbstractContextManager[Topology]],
) -> Iterator[tuple[Topology, Topology]]:
    with start() as first, start() as second:
        yield first, second


async def compare(
    topologies: tuple[Topology, Topology], cases: tuple[Case, Case], jobs: int, calls: int
) -> tuple[Probe, Probe]:
    """Fill both, then probe them in alternating rounds."""
    probes = (Probe(cases[0], jobs), Probe(cases[1], jobs))
    stubs = [Stubs(topology) for topology in topologies]
    try:
        for topology, stub, case in zip(topologies, stubs, cases, strict=True):
            if topology.redis is not None:
                await fill_redis(topology, case, jobs)
            else:
                await fill_embedded(stub.jobs, case, jobs)
        for stub, probe in zip(stubs, probes, strict=True):
            await probe_round(stub, probe, WARMUP_CALLS, kept=False)
        for round_ in range(ROUNDS):
            order = [0, 1] if round_ % 2 == 0 else [1, 0]
            for index in order:
                await probe_round(stubs[index], probes[index], max(1, calls // ROUNDS))
    finally:
        for stub in stubs:
            await stub.close()
    return probes


def spread_rows(jobs: int, tenants: int, calls: int) -> list[Comparison]:
    """Every comparison on Redis (no persistence) and on the embedded store."""
    starts: list[tuple[str, Callable[[], contextlib.AbstractContextManager[Topology]]]] = [
        ("redis (no persistence)", lambda: servers.on_redis(None)),
        ("embedded", servers.embedded),
    ]
    rows = []
    for store, start in starts:
        for what, spread, single in comparisons(jobs, tenants):
            with two(start) as topologies:
                probes = asyncio.run(compare(topologies, (spread, single), jobs, calls))
            rows.append(Comparison(store, what, *probes))
    return rows


def _p50_p99(samples: Sequence[float]) -> str:
    return f"{ms(percentile(samples, 0.5))} / {ms(percentile(samples, 0.99))}"


def _verdict(ratio: float) -> str:
    return "within" if ratio <= BOUND else "**OVER**"


def spread_lines(rows: list[Comparison], calls: int) -> list[str]:
    cells = []
    for row in rows:
        for probe in (row.spread, row.single):
            cells.append([row.store, probe.case.label, f"{probe.queued:,}",
                          _p50_p99(probe.submit), _p50_p99(probe.claim)])  # fmt: skip
        ratios = [row.ratio("submit"), row.ratio("claim")]
        cells.append([row.store, f"{row.spread.case.label} / {row.single.case.label}", "",
                      *(f"{r:.2f}x {_verdict(r)}" for r in ratios)])  # fmt: skip
    header = ["store", "queued jobs spread over", "queued", "Submit p50 / p99 ms",
              "ClaimNext p50 / p99 ms"]  # fmt: skip
    return [f"## 12. Many tenants against one, ten pools against one (fair share on; "
            f"{calls} calls of each kind per deployment)", "", *table(header, cells), "",
            "Each pair is two deployments holding the same number of queued jobs, filled "
            "first, then probed in alternating rounds (bench/spread.py): Submits from the "
            "next tenant and bound to the next pool of the spread, then ClaimNext calls for "
            f"the next pool (each after {WARMUP_CALLS} untimed calls of each kind). The "
            f"ratio rows are the spread deployment's p50 over the single one's; the bound is "
            f"{BOUND}x.", ""]  # fmt: skip
