"""The placement scenario's parts: its tenants and pools, the claimers of the test's
own on ClaimNext and on ReportAndClaim, and the placement fuzzer.

Tenants: `bank` may run only in `onprem`; `clinic` in `edge` (first) or
`onprem`; `lab` (weight 3) and `acme` anywhere. Workers serve three pools,
`onprem`, `edge` and `cloud`, one credential each. A job's expected binding
is DESIGN's: a restricted tenant's job naming no pool goes to the tenant's
first pool, any other job to the pool it names ("" = any pool).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import duration_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from jobgate.v1.limits import POOL_PATTERN
from tests.e2e import test_fuzz as fuzz
from tests.e2e.api import parse_failure
from tests.e2e.harness import AuthFile, Token, write_auth_file
from tests.faults.ledger import Attempt, Refusal
from tests.faults.rig import RETRYABLE, Rig

POOLS = ("onprem", "edge", "cloud")
#: tenant -> its allowed pools (None: any), its weight.
TENANTS: dict[str, tuple[tuple[str, ...] | None, int]] = {
    "bank": (("onprem",), 1),
    "clinic": (("edge", "onprem"), 1),
    "lab": (None, 3),
    "acme": (None, 1),
}
#: What each tenant's jobs ask for in the steady load; `FORBIDDEN` its refusals.
ASKS = {
    "bank": ("", "onprem"),
    "clinic": ("", "edge", "onprem"),
    "lab": ("", "cloud", "edge", "onprem"),
    "acme": ("", "cloud"),
}
FORBIDDEN = {"bank": ("edge", "cloud"), "clinic": ("cloud",)}
#: The model of the fuzzer's own jobs: no daemon serves it; the fuzzer's claims
#: take them (and, now and then, real ones).
FUZZ_MODEL = "fuzz-placed"
APPLIED = worker_service_pb2.REPORT_OUTCOME_APPLIED


def placement_auth(path: Path) -> AuthFile:
    """One client token per tenant (with its pools and weight), one worker token per pool."""
    secret = uuid.uuid4().hex
    tokens = [
        Token(f"{tenant}-{secret}", tenant, "client", pools=pools, weight=weight)
        for tenant, (pools, weight) in TENANTS.items()
    ]
    tokens += [Token(f"{pool}-{secret}", "fleet", "worker", pool=pool) for pool in POOLS]
    return write_auth_file(path, tokens)


def allowed(tenant: str, pool: str) -> bool:
    pools = TENANTS[tenant][0]
    return pools is None or pool == "" or pool in pools


def binding(tenant: str, asked: str) -> str:
    """The pool a job of `tenant` asking for `asked` is bound to (if allowed)."""
    pools = TENANTS[tenant][0]
    return pools[0] if pools and not asked else asked


@dataclass
class Bindings:
    """The binding each accepted job must have: singles by id, children by parent and index."""

    jobs: dict[str, str] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def expect(self, tenant: str, job_id: str, work: job_pb2.JobSpec | job_pb2.GroupSpec) -> None:
        with self.lock:
            if isinstance(work, job_pb2.GroupSpec):
                self.children[job_id] = [binding(tenant, c.pool) for c in work.children]
            else:
                self.jobs[job_id] = binding(tenant, work.pool)

    def resolve(self, children: Sequence[tuple[str, str, int]]) -> dict[str, str]:
        """Every expected binding, given (child id, parent id, child index) of the children."""
        expected = dict(self.jobs)
        for child_id, parent_id, index in children:
            if parent_id in self.children:
                expected[child_id] = self.children[parent_id][index]
        return expected


def record_attempt(
    rig: Rig, claimed: worker_service_pb2.ClaimedJob, worker_id: str, start: float, applied: bool
) -> None:
    """A claim of the test's own, for the ledger: it ran from `start` to now; a result
    not applied is the server's word that the lease was lost."""
    now = time.time()
    job = claimed.job
    rig.extra_attempts.append(
        Attempt(job.id, job.attempts, claimed.lease_id, worker_id, start, now, "completed")
    )
    if not applied:
        rig.extra_refusals.append(Refusal(job.id, worker_id, "LEASE_LOST", now))


def completed(claimed: worker_service_pb2.ClaimedJob) -> worker_service_pb2.SetResultRequest:
    return worker_service_pb2.SetResultRequest(
        job_id=claimed.job.id, lease_id=claimed.lease_id, status=job_pb2.JOB_STATUS_COMPLETED
    )


@dataclass
class ClaimTally:
    """What the test's own claimers and the fuzzer saw."""

    claims: dict[str, int] = field(default_factory=dict)  # claim path -> jobs claimed
    #: Claims naming another pool than the credential's, refused POOL_NOT_ALLOWED.
    foreign_refused: int = 0
    #: Jobs handed to a claim outside its credential's pool, or a foreign-pool claim served.
    misplaced: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def took(self, path: str, pool: str, jobs: Sequence[worker_service_pb2.ClaimedJob]) -> None:
        with self.lock:
            self.claims[path] = self.claims.get(path, 0) + len(jobs)
            self.misplaced += [
                f"{path} of pool {pool} got {c.job.id} of pool {c.job.pool!r}"
                for c in jobs
                if c.job.pool not in ("", pool)
            ]


class Claimer:
    """A worker of the test's own on one claim path ("ClaimNext" or "ReportAndClaim"),
    holding `token`: it claims for its credential's pool (naming it, or none), now and
    then names another pool (which must be refused), and completes each job at once
    (SetResult, or the next ReportAndClaim's results)."""

    def __init__(self, rig: Rig, token: Token, path: str, tally: ClaimTally) -> None:
        assert token.pool is not None
        self.rig, self.pool, self.path, self.tally = rig, token.pool, path, tally
        self.worker_id = f"{'classic' if path == 'ClaimNext' else 'fast'}-{token.pool}"
        self.metadata = token.metadata
        rig.worker_pools[self.worker_id] = token.pool
        self._channels = [grpc.aio.insecure_channel(t) for t in rig.deployment.worker_targets]
        self._stubs = [worker_service_pb2_grpc.WorkerServiceStub(c) for c in self._channels]
        self._held: list[tuple[worker_service_pb2.ClaimedJob, float]] = []
        self._calls = 0

    def _pool_to_name(self) -> str:
        """Its own pool, none (the credential's), or one call in eight another pool."""
        self._calls += 1
        if self._calls % 8 == 0:
            return next(p for p in POOLS if p != self.pool)
        return self.pool if self._calls % 2 else ""

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            stub = self._stubs[self._calls % len(self._stubs)]
            try:
                await self._round(stub, self._pool_to_name())
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRYABLE:
                    raise
                await asyncio.sleep(0.1)  # a worker-server restarting: try the other
        await self._finish()

    async def _round(self, stub: worker_service_pb2_grpc.WorkerServiceAsyncStub, pool: str) -> None:
        wait = duration_pb2.Duration(nanos=300_000_000)
        try:
            if self.path == "ClaimNext":
                request = worker_service_pb2.ClaimNextRequest(
                    worker_id=self.worker_id, models=[self.rig.model], max_jobs=2, pool=pool
                )
                request.wait.CopyFrom(wait)
                response = await stub.ClaimNext(request, metadata=self.metadata, timeout=10)
                jobs = list(response.jobs)
            else:
                jobs = await self._exchange(stub, pool, wait)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.PERMISSION_DENIED:
                raise
            assert pool not in ("", self.pool), f"{self.worker_id}: own pool refused: {error}"
            assert parse_failure(error).reason == "POOL_NOT_ALLOWED", error
            with self.tally.lock:
                self.tally.foreign_refused += 1
            return
        assert pool in ("", self.pool), f"{self.worker_id} was served a claim for pool {pool}"
        self.tally.took(self.path, self.pool, jobs)
        start = time.time()
        if self.path == "ClaimNext":
            for claimed in jobs:
                applied = await self._set_result(claimed)
                record_attempt(self.rig, claimed, self.worker_id, start, applied)
        else:
            self._held = [(claimed, start) for claimed in jobs]

    async def _set_result(self, claimed: worker_service_pb2.ClaimedJob) -> bool:
        """Complete the job (on either worker-server); whether the result was applied."""
        for attempt in range(50):
            stub = self._stubs[attempt % len(self._stubs)]
            try:
                await stub.SetResult(completed(claimed), metadata=self.metadata, timeout=10)
            except grpc.aio.AioRpcError as error:
                if error.code() in RETRYABLE:
                    await asyncio.sleep(0.1)
                    continue
                # the lease was lost (FAILED_PRECONDITION) or the job is gone
                return False
            return True
        raise AssertionError(f"SetResult of {claimed.job.id} kept failing")

    async def _exchange(
        self,
        stub: worker_service_pb2_grpc.WorkerServiceAsyncStub,
        pool: str,
        wait: Any,
        max_jobs: int = 2,
    ) -> list[worker_service_pb2.ClaimedJob]:
        """One ReportAndClaim carrying the results of the jobs held since the last."""
        request = worker_service_pb2.ReportAndClaimRequest(
            worker_id=self.worker_id,
            models=[self.rig.model],
            max_jobs=max_jobs,
            pool=pool,
            results=[completed(claimed) for claimed, _ in self._held],
        )
        request.wait.CopyFrom(wait)
        response = await stub.ReportAndClaim(request, metadata=self.metadata, timeout=10)
        for (claimed, start), answer in zip(self._held, response.results, strict=True):
            record_attempt(self.rig, claimed, self.worker_id, start, answer.outcome == APPLIED)
        self._held = []
        return list(response.jobs)

    async def _finish(self) -> None:
        """Report what is still held (the last exchange's jobs), then close."""
        while self._held:
            try:
                await self._exchange(self._stubs[0], "", duration_pb2.Duration(), 0)
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRYABLE:
                    raise
                await asyncio.sleep(0.1)
        for channel in self._channels:
            await channel.close(None)


# ---------------------------------------------------------------- the fuzzer


@dataclass
class FuzzRun:
    sent: int = 0
    created: list[tuple[str, str]] = field(default_factory=list)  # (tenant, job id)
    #: Submits and BatchSubmits refused POOL_NOT_ALLOWED, as predicted.
    submits_refused: int = 0
    #: Answers that differed from the prediction, or broke placement.
    wrong: list[str] = field(default_factory=list)


def predicted(tenant: str, specs: Sequence[job_pb2.JobSpec]) -> grpc.StatusCode:
    """A Submit's answer from its pools alone (everything else in it is valid)."""
    if any(s.pool and not POOL_PATTERN.fullmatch(s.pool) for s in specs):
        return grpc.StatusCode.INVALID_ARGUMENT
    if not all(allowed(tenant, s.pool) for s in specs):
        return grpc.StatusCode.PERMISSION_DENIED
    return grpc.StatusCode.OK


def specs_of(request: job_service_pb2.SubmitRequest) -> list[job_pb2.JobSpec]:
    return list(request.group.children) if request.HasField("group") else [request.job]


def work_of(request: job_service_pb2.SubmitRequest) -> job_pb2.JobSpec | job_pb2.GroupSpec:
    return request.group if request.HasField("group") else request.job


def fuzz_strategies(model: str) -> dict[str, st.SearchStrategy[Any]]:
    """Requests whose pools are drawn in and out of every list, valid and not."""
    pools = st.one_of(
        st.sampled_from(["", *POOLS, "gpu-x", "default"]), fuzz.short_texts, fuzz.texts
    )
    models = fuzz.rarely(st.just(FUZZ_MODEL), st.just(model), one_in=4)
    specs = st.builds(job_pb2.JobSpec, model=models, pool=pools)
    # Fresh keys only (hypothesis replays drawn values): a key never names two bodies.
    keys = st.one_of(st.just(""), st.builds(lambda: uuid.uuid4().hex))
    submits = st.one_of(
        st.builds(job_service_pb2.SubmitRequest, idempotency_key=keys, job=specs),
        st.builds(
            job_service_pb2.SubmitRequest,
            idempotency_key=keys,
            group=st.builds(job_pb2.GroupSpec, children=st.lists(specs, min_size=1, max_size=4)),
        ),
    )
    claim_models = st.one_of(
        st.lists(st.sampled_from([FUZZ_MODEL, model]), min_size=1, max_size=2, unique=True),
        st.lists(fuzz.short_texts, max_size=3),
    )
    return {
        "tenant": st.sampled_from(sorted(TENANTS)),
        "submit": submits,
        "batch": st.builds(
            job_service_pb2.BatchSubmitRequest, requests=st.lists(submits, min_size=1, max_size=4)
        ),
        "credential": st.sampled_from(POOLS),
        "claim": st.builds(
            worker_service_pb2.ClaimNextRequest,
            models=claim_models,
            max_jobs=st.integers(-1, 4),
            pool=pools,
        ),
        "exchange": st.builds(
            worker_service_pb2.ReportAndClaimRequest,
            models=claim_models,
            max_jobs=st.integers(-1, 4),
            pool=pools,
        ),
    }


class PlacementFuzzer:
    """Hypothesis over Submit, BatchSubmit, ClaimNext and ReportAndClaim with pools in and
    out of each tenant's and worker's list, every answer checked against the rules.

    A Submit or BatchSubmit is answered as `predicted` says (POOL_NOT_ALLOWED for a
    pool outside a restricted tenant's list, nothing created) and what it creates
    is bound as DESIGN says; a claim naming another pool than its credential's is
    never served, and a served claim holds only its pool's and any-pool jobs, each
    completed at once. Sync, on its own thread, while the rig's load runs.
    """

    def __init__(self, rig: Rig, auth: AuthFile, bindings: Bindings, tally: ClaimTally) -> None:
        self.rig, self.auth, self.bindings, self.tally = rig, auth, bindings, tally
        self.run = FuzzRun()
        for pool in POOLS:
            rig.worker_pools[f"fuzz-{pool}"] = pool

    def submit(self, stub: Any, tenant: str, request: job_service_pb2.SubmitRequest) -> None:
        expected = predicted(tenant, specs_of(request))
        answer, code = fuzz.answer_or_code(
            lambda: stub.Submit(request, metadata=self.rig.metadata(tenant), timeout=10), request
        )
        self._judge("Submit", expected, code or grpc.StatusCode.OK, request)
        if answer is not None:
            self._created(tenant, answer.job, request)

    def batch(self, stub: Any, tenant: str, request: job_service_pb2.BatchSubmitRequest) -> None:
        every = [s for item in request.requests for s in specs_of(item)]
        expected = predicted(tenant, every)
        answer, code = fuzz.answer_or_code(
            lambda: stub.BatchSubmit(request, metadata=self.rig.metadata(tenant), timeout=10),
            request,
        )
        self._judge("BatchSubmit", expected, code or grpc.StatusCode.OK, request)
        if answer is not None:
            for item, response in zip(request.requests, answer.responses, strict=True):
                self._created(tenant, response.job, item)

    def _judge(self, method: str, expected: grpc.StatusCode, got: grpc.StatusCode, r: Any) -> None:
        if got != expected:
            self.run.wrong.append(f"{method} answered {got.name}, expected {expected.name}: {r!r}")
        elif got == grpc.StatusCode.PERMISSION_DENIED:
            self.run.submits_refused += 1

    def _created(
        self, tenant: str, job: job_pb2.Job, request: job_service_pb2.SubmitRequest
    ) -> None:
        work = work_of(request)
        if isinstance(work, job_pb2.JobSpec) and job.pool != binding(tenant, work.pool):
            self.run.wrong.append(f"{job.id} of {tenant} asking {work.pool!r} bound to {job.pool}")
        self.bindings.expect(tenant, job.id, work)
        self.run.created.append((tenant, job.id))

    def claim(self, stub: Any, credential: str, request: Any) -> None:
        """A ClaimNext or ReportAndClaim as the credential's fuzz worker; completes its jobs."""
        token = self.auth.worker(credential)
        request.worker_id = f"fuzz-{credential}"
        method = (
            stub.ClaimNext
            if isinstance(request, worker_service_pb2.ClaimNextRequest)
            else (stub.ReportAndClaim)
        )
        path = f"fuzzed {type(request).__name__.removesuffix('Request')}"
        try:
            response = method(request, metadata=token.metadata, timeout=10)
        except grpc.RpcError as error:
            code = error.code()
            assert code not in fuzz.NEVER, f"{code} for {request!r}: {error.details()}"
            if code == grpc.StatusCode.PERMISSION_DENIED:
                if request.pool in ("", credential):
                    self.run.wrong.append(f"own pool refused: {request!r}")
                with self.tally.lock:
                    self.tally.foreign_refused += 1
            return
        if request.pool not in ("", credential):
            self.run.wrong.append(f"a claim for {request.pool!r} served to {credential}")
        jobs = list(response.jobs)
        self.tally.took(path, credential, jobs)
        start = time.time()
        for claimed in jobs:
            try:
                stub.SetResult(completed(claimed), metadata=token.metadata, timeout=10)
                applied = True
            except grpc.RpcError:  # the lease was lost meanwhile: the server's refusal
                applied = False
            record_attempt(self.rig, claimed, request.worker_id, start, applied)

    def __call__(self, examples: int) -> FuzzRun:
        strategies = fuzz_strategies(self.rig.model)
        with (
            grpc.insecure_channel(self.rig.deployment.job_target) as jobs,
            grpc.insecure_channel(self.rig.deployment.worker_target) as workers,
        ):
            job_stub = job_service_pb2_grpc.JobServiceStub(jobs)
            worker_stub = worker_service_pb2_grpc.WorkerServiceStub(workers)
            calls: list[Callable[[dict[str, Any]], None]] = [
                lambda d: self.submit(job_stub, d["tenant"], d["submit"]),
                lambda d: self.batch(job_stub, d["tenant"], d["batch"]),
                lambda d: self.claim(worker_stub, d["credential"], d["claim"]),
                lambda d: self.claim(worker_stub, d["credential"], d["exchange"]),
            ]

            @settings(parent=fuzz.FUZZ, max_examples=examples)
            @given(**strategies)
            def check(**drawn: Any) -> None:
                for call in calls:
                    call(drawn)
                    self.run.sent += 1

            check()
        return self.run
