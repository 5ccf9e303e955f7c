"""Placement under faults (issue 19, part 4): restricted and free tenants, workers of
three pools on every claim path, worker SIGKILLs, server restarts and a fuzzer.

The tenants and pools are tests/faults/placement.py's. Jobs are claimed by
`jobgate worker` daemons (one per pool: two name `--pool`, one claims for its
credential's pool; the daemons use the ReportAndClaim fast path), by claimers
of the test's own on ClaimNext and on ReportAndClaim (one each per pool,
naming their pool, none, or now and then another pool, which must be
refused), and by the placement fuzzer's claims. Meanwhile daemons are
SIGKILLed mid-job and replaced, every server is restarted (SIGTERM, then
started on its addresses), and the fuzzer sends Submits, groups and batches
naming pools in and out of each tenant's list.

The oracle (tests/faults/ledger.py PLACEMENT_CHECKS) holds every claim the
audit trail records and every attempt a handler ran to the rule: the
worker's pool is the job's, or the job may run in any pool; and every job is
bound as its request and tenant say. The usual invariants hold too.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import pytest

from jobgate.v1 import job_pb2, job_service_pb2
from tests.e2e.api import parse_failure
from tests.e2e.harness import AuthFile, restart_process
from tests.faults.conftest import RigFactory, Scale
from tests.faults.ledger import PLACEMENT_CHECKS as CHECKS
from tests.faults.ledger import Ledger, check_placement, claim_events, claims_per_pool
from tests.faults.placement import (
    ASKS,
    FORBIDDEN,
    POOLS,
    TENANTS,
    Bindings,
    Claimer,
    ClaimTally,
    PlacementFuzzer,
    placement_auth,
)
from tests.faults.rig import Figures, Rig, WorkerProcess, assert_clean, figures_of, payload, until

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

#: Which daemon slots name --pool (the edge one claims for its credential's pool).
DAEMONS = (("onprem", True), ("edge", False), ("cloud", True))
WORK = payload(0.05)
#: The test's own generator: hypothesis (the fuzzer, on another thread) fails a
#: run when the global one moves under it.
CHOICES = random.Random()


@dataclass
class PlacedLoad:
    """Submits from every tenant asking for pools its list allows (singles and groups),
    and now and then one it does not allow, which must be refused POOL_NOT_ALLOWED."""

    rig: Rig
    bindings: Bindings
    ids: dict[str, list[str]] = field(default_factory=lambda: {t: [] for t in TENANTS})
    refused: int = 0
    _random: random.Random = field(default_factory=random.Random)

    def _request(self, tenant: str) -> job_service_pb2.SubmitRequest:
        forbidden = FORBIDDEN.get(tenant, ())
        if forbidden and self._random.random() < 0.1:
            asked = self._random.choice(forbidden)
        else:
            asked = self._random.choice(ASKS[tenant])
        request = job_service_pb2.SubmitRequest(idempotency_key=self._random.randbytes(8).hex())
        spec = job_pb2.JobSpec(model=self.rig.model, payload=WORK, pool=asked)
        if self._random.random() < 0.15:
            request.group.children.extend([spec, job_pb2.JobSpec(model=self.rig.model)])
        else:
            request.job.CopyFrom(spec)
        return request

    async def _one(self, tenant: str) -> None:
        request = self._request(tenant)
        try:
            job_id = await self.rig.submit(tenant, request)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
            assert parse_failure(error).reason == "POOL_NOT_ALLOWED", error
            self.refused += 1
            return
        work = request.group if request.HasField("group") else request.job
        self.bindings.expect(tenant, job_id, work)
        self.ids[tenant].append(job_id)

    async def run(self, stop: asyncio.Event) -> None:
        async def loop() -> None:
            while not stop.is_set():
                await self._one(self._random.choice(sorted(TENANTS)))
                await asyncio.sleep(0.03)

        await asyncio.gather(*(loop() for _ in range(3)))


class Daemons:
    """One daemon per pool, replaced when killed (same pool, same way of naming it)."""

    def __init__(self, rig: Rig, auth: AuthFile) -> None:
        self.rig, self.auth = rig, auth
        self.slots: dict[str, WorkerProcess] = {}
        self.kills = 0
        for pool, names_it in DAEMONS:
            self._start(pool, names_it)

    def _start(self, pool: str, names_it: bool) -> None:
        token = self.auth.worker(pool)
        self.slots[pool] = self.rig.start_worker(
            concurrency=2, pool=pool if names_it else "", token=token
        )

    def replace_dead(self) -> None:
        for pool, names_it in DAEMONS:
            if not self.slots[pool].alive:
                self._start(pool, names_it)

    def kill_a_busy_one(self) -> bool:
        running = {a.worker_id for a in self.rig.read_attempts() if a.end is None}
        busy = [w for w in self.slots.values() if w.alive and w.worker_id in running]
        if not busy:
            return False
        self.rig.kill_worker(CHOICES.choice(busy))
        self.kills += 1
        return True


async def inject_kills(daemons: Daemons, kills: int) -> None:
    while daemons.kills < kills:
        await asyncio.sleep(CHOICES.uniform(0.3, 0.8))
        daemons.replace_dead()
        daemons.kill_a_busy_one()
    daemons.replace_dead()


async def restart_every_server(rig: Rig) -> int:
    for process in rig.deployment.processes:
        assert await asyncio.to_thread(process.terminate) == 0, process.log_tail()
        await asyncio.to_thread(restart_process, process)
    return len(rig.deployment.processes)


def path_of(worker_id: str) -> str:
    """The claim path of a worker id: daemon, ClaimNext, ReportAndClaim or the fuzzer."""
    for prefix, path in (("classic-", "ClaimNext"), ("fast-", "ReportAndClaim")):
        if worker_id.startswith(prefix):
            return path
    return "fuzzer" if worker_id.startswith("fuzz-") else "daemon"


def claims_per_path(ledger: Ledger) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in claim_events(ledger):
        path = path_of(event.worker_id)
        counts[path] = counts.get(path, 0) + 1
    return dict(sorted(counts.items()))


async def test_placement_holds_on_every_claim_path_through_kills_restarts_and_fuzzing(
    make_rig: RigFactory,
    scale: Scale,
    figures: Callable[[Figures], None],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    auth = placement_auth(tmp_path_factory.mktemp("placement") / "auth.json")
    rig = make_rig(worker_servers=2, auth=auth)
    bindings, tally = Bindings(), ClaimTally()
    daemons = Daemons(rig, auth)
    claimers = [
        Claimer(rig, auth.worker(pool), path, tally)
        for pool in POOLS
        for path in ("ClaimNext", "ReportAndClaim")
    ]
    fuzzer = PlacementFuzzer(rig, auth, bindings, tally)
    load = PlacedLoad(rig, bindings)
    stop_load, stop_claims = asyncio.Event(), asyncio.Event()
    loading = asyncio.create_task(load.run(stop_load))
    claiming = [asyncio.create_task(c.run(stop_claims)) for c in claimers]

    assert await until(lambda: len(rig.accepted) >= 30, 30)
    _, run = await asyncio.gather(
        inject_kills(daemons, scale(3, 30)),
        asyncio.to_thread(fuzzer, scale(40, 400)),
    )
    restarts = await restart_every_server(rig)
    more = len(rig.accepted) + 20  # the load goes on through the restarted servers
    assert await until(lambda: len(rig.accepted) >= more, 30)
    stop_load.set()
    await loading
    stop_claims.set()
    await asyncio.gather(*claiming)
    for tenant, job_id in run.created:  # the fuzzer's jobs of pools nobody serves
        await rig.cancel(tenant, job_id)
    created: dict[str, list[str]] = {t: [] for t in TENANTS}
    for tenant, job_id in run.created:
        created[tenant].append(job_id)
    rig.accepted.update(job_id for _, job_id in run.created)
    everything = {t: load.ids[t] + created[t] for t in TENANTS}
    ledger = await rig.collect(everything, timeout=scale(90, 900))
    children = [(f.job_id, f.parent_id, f.child_index) for f in ledger.finals.values()]
    ledger.bindings = bindings.resolve([c for c in children if c[1]])

    assert run.wrong == [] and tally.misplaced == []
    assert_clean(ledger, extra=CHECKS)
    load_jobs = [j for ids in load.ids.values() for j in ids]
    assert all(ledger.finals[j].status == "completed" for j in load_jobs)
    # Not vacuous: every pool and every claim path claimed, refusals were made.
    per_pool = claims_per_pool(ledger)
    assert all(per_pool.get(pool, 0) > 0 for pool in POOLS), per_pool
    per_path = claims_per_path(ledger)
    assert {"daemon", "ClaimNext", "ReportAndClaim"} <= per_path.keys(), per_path
    assert load.refused and tally.foreign_refused and run.submits_refused
    figures(
        figures_of(
            "placement: 4 tenants (2 restricted), 3 pools, every claim path",
            ledger,
            daemons.kills + restarts,
            claims_per_pool=per_pool,
            claims_per_path=per_path,
            placement_violations=len(check_placement(ledger)),
            bindings_checked=len(ledger.bindings),
            submits_pool_not_allowed=load.refused + run.submits_refused,
            claims_pool_not_allowed=tally.foreign_refused,
            worker_sigkills=daemons.kills,
            server_restarts=restarts,
            fuzz_requests=run.sent,
        )
    )
