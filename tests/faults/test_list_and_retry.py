"""ListJobs walks with random filters while jobs change, and RetryJob raced with claims,
cancels, lease expiry and recovery (issue 20), on a real Redis deployment.

The test is its own worker (as test_races.py), so it knows every change it
makes and when. Oracles:

- a walk: a job that existed before the walk began and that nothing changed
  until it ended (no call of the test touched it, no lease of it was open)
  and that matched the filter is listed exactly once; no job is listed
  twice; every listed job matches the filter as listed (it matched when its
  page was read); its fixed fields equal Get's;
- retries: never two live leases (a call with a lease succeeds only if no
  newer lease of the job had been granted before the call was sent), and
  never a retried job that also completes its old attempt (a lease granted
  before a retry was sent cannot end the job after that retry answered).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc
import pytest

from jobgate.v1 import job_pb2
from tests.e2e.api import Api, parse_failure, spec, tenant_metadata
from tests.faults.conftest import RigFactory, Scale
from tests.faults.rig import Figures, Rig, status_name, until

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT = "acme"
TEAMS = ("ads", "search", "ranking")
#: Longer than a lease's expiry takes to be recovered (lease 1 s, recovery each second).
RECOVERY_ROUND = 3.0
STATUSES = ("QUEUED", "PROCESSING", "COMPLETED", "FAILED", "CANCELLED", "HELD", "PARTIAL")
KINDS = ("SINGLE", "GROUP", "CHILD")
#: The fields a job never changes: a listed job's must equal Get's.
FIXED = ("id", "tenant", "kind", "model", "priority", "parent_id", "child_index", "pool",
         "content_type", "idempotency_key", "max_attempts", "create_time")  # fmt: skip


@pytest.fixture
async def rig(make_rig: RigFactory) -> AsyncIterator[Rig]:
    yield make_rig()


def api_of(rig: Rig, channel: grpc.aio.Channel, worker_id: str) -> Api:
    return Api(rig.job_channel, channel, tenant_metadata(TENANT), worker_id=worker_id)


# -- ListJobs while jobs change -----------------------------------------------


@dataclass
class Term:
    field: str
    value: str

    @property
    def text(self) -> str:
        return f'{self.field} = "{self.value}"'

    def holds(self, job: job_pb2.Job) -> bool:
        if self.field == "status":
            return status_name(job.status) == self.value.lower()
        if self.field == "kind":
            return job_pb2.JobKind.Name(job.kind) == f"JOB_KIND_{self.value}"
        if self.field.startswith("labels."):
            return job.labels.get(self.field.removeprefix("labels.")) == self.value
        return bool(getattr(job, self.field) == self.value)


def random_filter(chooser: random.Random, models: list[str]) -> list[Term]:
    pool = [
        Term("status", chooser.choice(STATUSES)),
        Term("kind", chooser.choice(KINDS)),
        Term("model", chooser.choice(models)),
        Term("labels.team", chooser.choice(TEAMS)),
        Term("error_code", chooser.choice(("", "BOOM"))),
    ]
    return chooser.sample(pool, chooser.randint(0, 3))


@dataclass
class Touches:
    """When the test changed each job (its calls' send and answer times)."""

    spans: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, job_id: str, start: float, end: float) -> None:
        self.spans.setdefault(job_id, []).append((start, end))

    def untouched(self, job_id: str, start: float, end: float) -> bool:
        return all(b < start or a > end for a, b in self.spans.get(job_id, []))


async def churn(api: Api, models: list[str], touches: Touches, stop: asyncio.Event) -> None:
    """Submit, claim and end (complete or fail), cancel and retry, until `stop`."""
    chooser = random.Random()
    known: list[str] = []
    while not stop.is_set():
        start = time.time()
        move = chooser.random()
        if move < 0.3:
            job = await api.submit(chooser.choice(models), labels={"team": chooser.choice(TEAMS)})
            known.append(job.id)
            touches.add(job.id, start, time.time())
            continue
        if move < 0.7:
            for claimed in await api.claim(models, max_jobs=2):
                done = chooser.random() < 0.5
                call = (api.complete(claimed.job.id, claimed.lease_id) if done
                        else api.fail(claimed.job.id, claimed.lease_id, code="BOOM"))  # fmt: skip
                settled = 0.0
                try:
                    await call
                except grpc.aio.AioRpcError as error:
                    # a loaded machine let the 1 s lease expire: recovery requeues it
                    # (up to a recovery round later), which the walk may see
                    assert parse_failure(error).reason == "LEASE_LOST", error
                    settled = RECOVERY_ROUND
                for job_id in (claimed.job.id, claimed.job.parent_id):
                    touches.add(job_id, start, time.time() + settled)
            continue
        if known:
            job_id = chooser.choice(known)
            with_retry = move < 0.85
            try:
                await (api.retry(job_id) if with_retry else api.cancel(job_id))
            except grpc.aio.AioRpcError as error:
                assert parse_failure(error).reason in ("JOB_NOT_RETRYABLE",), error
            touches.add(job_id, start, time.time())


async def walk(api: Api, terms: list[Term], page_size: int) -> list[job_pb2.Job]:
    text = " AND ".join(term.text for term in terms)
    listed: list[job_pb2.Job] = []
    token = ""
    while True:
        page = await api.list_jobs(text, page_size, token)
        listed += page.jobs
        if not page.next_page_token:
            return listed
        token = page.next_page_token


async def test_list_walks_with_random_filters_while_jobs_change(
    rig: Rig, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    channel = grpc.aio.insecure_channel(rig.deployment.worker_target)
    api = api_of(rig, channel, "lister")
    models = [f"{rig.model}-{i}" for i in range(3)]
    touches = Touches()
    chooser = random.Random()
    for index in range(scale(40, 400)):
        start = time.time()
        model, team = models[index % 3], TEAMS[index % 3]
        if index % 10 == 0:
            job = await api.submit_group([spec(model, labels={"team": team})] * 3, max_parallel=1)
        else:
            job = await api.submit(model, labels={"team": team})
        touches.add(job.id, start, time.time())
    stop = asyncio.Event()
    changing = asyncio.create_task(churn(api, models, touches, stop))
    walks, listed_total = scale(12, 120), 0
    try:
        for _ in range(walks):
            terms = random_filter(chooser, models)
            began = time.time()
            before = {job.id: job for job in await walk(api, [], 1000)}
            listed = await walk(api, terms, chooser.choice((1, 2, 5, 20)))
            ended = time.time()
            listed_total += len(listed)
            ids = [job.id for job in listed]
            assert len(ids) == len(set(ids)), terms
            for job in listed:
                assert all(term.holds(job) for term in terms), (terms, job)
                got = await api.get(job.id)
                assert [getattr(job, f) for f in FIXED] == [getattr(got, f) for f in FIXED]
            throughout = {
                job_id
                for job_id, job in before.items()
                if touches.untouched(job_id, began, ended)
                and touches.untouched(job.parent_id, began, ended)
                and all(term.holds(job) for term in terms)
            }
            assert throughout <= set(ids), (terms, throughout - set(ids))
    finally:
        stop.set()
        await changing
        await channel.close(None)
    figures(Figures("ListJobs walks while jobs change", len(touches.spans), notes={
        "walks": walks, "listed": listed_total}))  # fmt: skip


# -- RetryJob raced with claims, cancels, expiry, recovery ---------------------


@dataclass
class Lease:
    job_id: str
    lease_id: str
    granted: float  # when the claim's answer came back


@dataclass
class Evidence:
    leases: dict[str, list[Lease]] = field(default_factory=dict)
    #: job id -> (sent, answered) of each successful RetryJob
    retries: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    #: (lease, call sent) of each call the store accepted with that lease
    accepted: list[tuple[Lease, float, str]] = field(default_factory=list)

    def violations(self) -> list[str]:
        found = []
        for lease, sent, call in self.accepted:
            newer = [other for other in self.leases[lease.job_id]
                     if other.granted > lease.granted and other.granted < sent]  # fmt: skip
            if newer:
                found.append(f"{call} of {lease.job_id} with a lease {newer[0].lease_id} replaced")
            retried = [r for r in self.retries.get(lease.job_id, [])
                       if r[0] > lease.granted and r[1] < sent]  # fmt: skip
            if retried and call == "SetResult":
                found.append(f"{lease.job_id} completed its attempt from before a retry")
        return found


async def test_retry_raced_with_claims_cancels_expiry_and_recovery(
    rig: Rig, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    channel = grpc.aio.insecure_channel(rig.deployment.worker_target)
    apis = [api_of(rig, channel, f"racer-{i}") for i in range(3)]
    evidence = Evidence()
    jobs = [(await apis[0].submit(rig.model)).id for _ in range(scale(20, 200))]
    # SUCCEEDED is final: a completed job is swapped for a new one, so the
    # meddler never runs out of jobs it may retry (all 20 done = no more races)
    submitted = list(jobs)
    stop = asyncio.Event()
    counts = {"retried": 0, "refused": 0, "lost": 0, "completed": 0}

    async def work(api: Api) -> None:
        chooser = random.Random()
        while not stop.is_set():
            batch = await api.claim([rig.model], wait=0.2, max_jobs=2)
            granted = time.time()
            leases = [Lease(claimed.job.id, claimed.lease_id, granted) for claimed in batch]
            for lease in leases:
                evidence.leases.setdefault(lease.job_id, []).append(lease)
            for lease in leases:
                # sometimes past the 1 s lease, so recovery requeues it under us
                await asyncio.sleep(chooser.choice((0.0, 0.05, 0.3, 1.3)))
                for call in ("Heartbeat", "SetResult"):
                    sent = time.time()
                    try:
                        if call == "Heartbeat":
                            await api.heartbeat(lease.job_id, lease.lease_id, 0.5)
                        elif chooser.random() < 0.3:
                            await api.complete(lease.job_id, lease.lease_id)
                            counts["completed"] += 1
                            await replace(lease.job_id, api)
                        else:
                            await api.fail(lease.job_id, lease.lease_id)
                    except grpc.aio.AioRpcError as error:
                        reason = parse_failure(error).reason
                        assert reason in ("LEASE_LOST", "JOB_CANCELLED"), error
                        counts["lost"] += 1
                        break
                    evidence.accepted.append((lease, sent, call))

    async def replace(job_id: str, api: Api) -> None:
        fresh = (await api.submit(rig.model)).id
        submitted.append(fresh)
        jobs[jobs.index(job_id)] = fresh

    async def meddle() -> None:
        chooser = random.Random()
        while not stop.is_set():
            job_id = chooser.choice(jobs)
            sent = time.time()
            try:
                if chooser.random() < 0.7:
                    await apis[0].retry(job_id)
                    evidence.retries.setdefault(job_id, []).append((sent, time.time()))
                    counts["retried"] += 1
                else:
                    await apis[0].cancel(job_id)
            except grpc.aio.AioRpcError as error:
                assert parse_failure(error).reason == "JOB_NOT_RETRYABLE", error
                counts["refused"] += 1
            await asyncio.sleep(chooser.uniform(0, 0.05))

    tasks = [asyncio.create_task(work(api)) for api in apis]
    tasks.append(asyncio.create_task(meddle()))
    # enough of each kind of race: retries, and old leases refused
    target = scale(40, 1000)
    raced = await until(lambda: min(counts["retried"], counts["lost"] * 4) >= target, 90)
    stop.set()
    await asyncio.gather(*tasks)
    await channel.close(None)

    assert raced, counts
    assert evidence.violations() == []
    assert counts["retried"] > 0
    finals = [await rig.get(TENANT, job_id) for job_id in submitted]
    assert all(final is not None for final in finals)
    figures(Figures("RetryJob vs claims, cancels, expiry", len(submitted), notes=counts))
