"""A fuzzer over every request message while real jobs flow through the daemons.

The strategies are tests/e2e/test_fuzz.py's, with the live jobs' real ids
mixed in, so fuzzed Heartbeats, SetResults and Cancels hit jobs that are
running. BatchSubmit and ReportAndClaim are fuzzed too. Over half the
Submits and BatchSubmits are valid but unusual (tests/e2e/test_fuzz.py's
valid_submits, against this rig's small CAPS; some on the daemons' model, so
they run), so they create jobs and reuse idempotency keys. Half the exchanges
are well-formed so they reach the store, and their results and heartbeats
carry live leases: those of the handlers running now (read from the handler
ledger as each example runs) and those the fuzzer's own claims were granted,
or a running job's id with a stale lease. A fuzzed claim leases the fuzzer's
own queued jobs (a model no daemon runs) and, now and then, real ones; a
real job it leases nobody runs: its one-second lease expires, the reaper
requeues it and a daemon runs it before the final drain gives up.

No answer may be INTERNAL or UNKNOWN; no result or heartbeat without a live
lease may be APPLIED; and afterwards the ledger of the real jobs (and of
every job the fuzzer queued or a fuzzed Submit or BatchSubmit created) keeps
every invariant: a fuzzed request changes nothing it may not. Every real job
ends completed, unless the fuzzer itself ended it with its live lease or
claimed it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from tests.e2e import test_fuzz as fuzz
from tests.faults.conftest import RigFactory, Scale
from tests.faults.rig import (
    Figures,
    Load,
    Rig,
    assert_clean,
    figures_of,
    payload,
    submit_many,
    until,
)

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT, FUZZER = "acme", "fuzz"
#: One entry per result and heartbeat an exchange can carry (fuzz.exchanges: 4 + 4).
PICKS = 8
#: A valid worker id, so some fuzzed exchanges pass validation and act.
FUZZ_WORKER = "fuzz-worker"
#: The model of the fuzzer's own queued jobs, for its claims to lease: no daemon runs
#: it, and it is one of fuzz.short_texts, so fuzzed Submits and claims name it too.
FUZZ_MODEL = "ok-model"
#: How many such jobs the fuzzer queues before it starts.
BAIT = 12
#: A well-formed lease id that no attempt holds.
STALE_LEASE = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
#: Caps small enough that valid fuzzed requests reach them cheaply (a full group,
#: a full batch, a payload at the cap) on every run; the real jobs are far below.
CAPS = {"max-payload-bytes": 65536, "max-group-children": 40, "max-batch-submit": 40}
Result = worker_service_pb2.SetResultRequest
Entry = Result | worker_service_pb2.HeartbeatRequest
Answer = worker_service_pb2.ResultAnswer | worker_service_pb2.HeartbeatAnswer


def job_of(entry: Entry) -> str:
    return entry.job_id


@dataclass
class FuzzRun:
    """What the fuzzer did that the oracle must know of."""

    sent: int = 0
    #: What fuzzed Submits and BatchSubmits created (tenant FUZZER) and reused; it
    #: checks that an idempotency key always names one job.
    book: fuzz.KeyBook = field(default_factory=fuzz.KeyBook)
    #: (job id, lease id) of every job a fuzzed claim was granted.
    held: list[tuple[str, str]] = field(default_factory=list)
    #: Jobs a fuzzed claim leased (real ones, or ones fuzzed submits created).
    claimed: set[str] = field(default_factory=set)
    #: Jobs a fuzzed result with a live lease ended (APPLIED); the running
    #: handlers' jobs include ones submitted after the fuzzing began.
    ended: set[str] = field(default_factory=set)
    #: Results and heartbeats APPLIED although their lease was no live one (fencing broken).
    unfenced: list[str] = field(default_factory=list)
    #: Results and heartbeats sent with a real live lease.
    live_leases_sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def on_jobs(
    entries: st.SearchStrategy[Entry], job_ids: st.SearchStrategy[str]
) -> st.SearchStrategy[Entry]:
    """`entries` with their job id drawn from `job_ids`."""

    def with_job(entry: Entry, job_id: str) -> Entry:
        entry.job_id = job_id
        return entry

    return st.builds(with_job, entries, job_ids)


def exchanges(
    model: str, real_ids: list[str]
) -> st.SearchStrategy[worker_service_pb2.ReportAndClaimRequest]:
    """Fuzzed exchanges (fuzz.exchanges with real job ids and the rig's model mixed in),
    or well-formed ones on real jobs.

    Nearly every fuzzed exchange is INVALID_ARGUMENT and does nothing, so half
    are built to pass validation: a valid worker id, models and max_jobs, a
    zero wait (a long poll would hold the run for its wait), and valid entries
    on real jobs with a stale lease, which `aim` may swap for a live one.
    """
    job_ids = st.one_of(fuzz.ids, st.sampled_from(real_ids))
    fuzzed = st.builds(
        worker_service_pb2.ReportAndClaimRequest,
        worker_id=fuzz.texts,
        models=st.lists(st.one_of(fuzz.short_texts, st.just(model)), max_size=40),
        wait=fuzz.claim_waits,  # valid waits are zero, as in the e2e fuzzer
        max_jobs=fuzz.INT32,
        results=st.lists(on_jobs(fuzz.results, job_ids), max_size=4),
        heartbeats=st.lists(on_jobs(fuzz.heartbeats, job_ids), max_size=4),
    )
    results = st.builds(
        worker_service_pb2.SetResultRequest,
        job_id=st.sampled_from(real_ids),
        lease_id=st.just(STALE_LEASE),
        status=st.sampled_from([job_pb2.JOB_STATUS_COMPLETED, job_pb2.JOB_STATUS_FAILED]),
        result=st.binary(max_size=200),
        error_code=st.sampled_from(["", "FUZZED"]),
        error_message=st.text(max_size=100),
        retryable=st.booleans(),
    )
    heartbeats = st.builds(
        worker_service_pb2.HeartbeatRequest,
        job_id=st.sampled_from(real_ids),
        lease_id=st.just(STALE_LEASE),
        progress=st.floats(0, 1),
        stage=st.sampled_from(["", "fuzzed"]),
    )
    well_formed = st.builds(
        worker_service_pb2.ReportAndClaimRequest,
        worker_id=st.just(FUZZ_WORKER),
        models=st.lists(st.sampled_from([model, FUZZ_MODEL]), min_size=1, max_size=2),
        max_jobs=st.integers(0, 4),
        # A job at most once per list, as validation asks.
        results=st.lists(results, max_size=4, unique_by=job_of),
        heartbeats=st.lists(heartbeats, max_size=4, unique_by=job_of),
    )
    return st.one_of(fuzzed, well_formed)


def running_leases(rig: Rig) -> list[tuple[str, str]]:
    """(job id, lease id) of the handler attempts running now, from the handler ledger."""
    return [(a.job_id, a.lease_id) for a in rig.read_attempts() if a.end is None]


def aim(
    exchange: worker_service_pb2.ReportAndClaimRequest,
    picks: list[int | None],
    running: list[tuple[str, str]],
    held: list[tuple[str, str]],
) -> int:
    """Point the exchange's entries at live jobs: a pick None keeps the entry's own ids;
    an even one names a running handler's lease or one the fuzzer holds, an odd one
    that lease's job with a stale lease (which must be refused). How many are live."""
    live = running + held
    aimed = 0
    entries: list[Entry] = [*exchange.results, *exchange.heartbeats]
    for entry, pick in zip(entries, picks, strict=False):
        if pick is None or not live:
            continue
        index = pick // 2 % len(live)
        job_id, lease_id = live[index]
        siblings = exchange.results if isinstance(entry, Result) else exchange.heartbeats
        if any(job_of(e) == job_id for e in siblings):
            continue  # a job at most once per list
        if pick % 2:
            entry.job_id, entry.lease_id = job_id, STALE_LEASE
            continue
        entry.job_id, entry.lease_id = job_id, lease_id
        aimed += 1
        if isinstance(entry, Result) and index < len(running):
            # A retry would requeue the job under its running handler; a daemon that
            # claims it again drops that handler with no LEASE_LOST the ledger can
            # read, and the lease check could not tell it from a double lease.
            entry.retryable = False
    return aimed


def run_fuzzer(rig: Rig, real_ids: list[str], examples: int) -> FuzzRun:
    """Hypothesis over every RPC (sync, on this thread); what the fuzzer did."""
    run = FuzzRun()
    job_ids = st.one_of(fuzz.ids, st.sampled_from(real_ids))
    # Valid requests name, now and then, the daemons' model: those jobs run for real.
    models = fuzz.rarely(fuzz.valid_models, st.just(rig.model), one_in=4)
    limits = (CAPS["max-payload-bytes"], CAPS["max-group-children"])
    submits = fuzz.half_and_half(fuzz.invalid_submits, fuzz.valid_submits(models, *limits))
    batches = fuzz.half_and_half(
        st.builds(job_service_pb2.BatchSubmitRequest, requests=st.lists(submits, max_size=4)),
        fuzz.valid_batches(models, *limits, CAPS["max-batch-submit"]),
    )
    picks = st.one_of(st.none(), st.integers(0, 2**16))
    metadata = (("x-jobgate-tenant", FUZZER),)
    with (
        grpc.insecure_channel(rig.deployment.job_target) as jobs,
        grpc.insecure_channel(rig.deployment.worker_target) as workers,
    ):
        job_stub = job_service_pb2_grpc.JobServiceStub(jobs)
        worker_stub = worker_service_pb2_grpc.WorkerServiceStub(workers)

        def send_submit(
            request: job_service_pb2.SubmitRequest,
        ) -> Callable[[], job_service_pb2.SubmitResponse]:
            return lambda: job_stub.Submit(request, metadata=metadata, timeout=10)

        def send_batch(
            request: job_service_pb2.BatchSubmitRequest,
        ) -> Callable[[], job_service_pb2.BatchSubmitResponse]:
            return lambda: job_stub.BatchSubmit(request, metadata=metadata, timeout=10)

        def report_and_claim(
            request: worker_service_pb2.ReportAndClaimRequest, live: set[str]
        ) -> None:
            response = worker_stub.ReportAndClaim(request, timeout=10)
            answers: list[Answer] = [*response.results, *response.heartbeats]
            entries: list[Entry] = [*request.results, *request.heartbeats]
            applied = worker_service_pb2.REPORT_OUTCOME_APPLIED
            with run.lock:
                run.held.extend((c.job.id, c.lease_id) for c in response.jobs)
                run.claimed.update(c.job.id for c in response.jobs)
                run.ended.update(a.job_id for a in response.results if a.outcome == applied)
                run.unfenced.extend(
                    f"{type(e).__name__} on {e.job_id} with lease {e.lease_id!r} was APPLIED"
                    for e, a in zip(entries, answers, strict=True)
                    if a.outcome == applied and e.lease_id not in live
                )

        @settings(parent=fuzz.FUZZ, max_examples=examples)
        @given(
            submit_request=submits,
            batch=batches,
            job_id=job_ids,
            claim=fuzz.claims,
            heartbeat=fuzz.heartbeats,
            result=fuzz.results,
            exchange=exchanges(rig.model, real_ids),
            lease_picks=st.lists(picks, min_size=PICKS, max_size=PICKS),
        )
        def check(
            submit_request: Any,
            batch: Any,
            job_id: str,
            claim: Any,
            heartbeat: Any,
            result: Any,
            exchange: Any,
            lease_picks: list[int | None],
        ) -> None:
            heartbeat.job_id = result.job_id = job_id
            with run.lock:
                held = list(run.held)
            running = running_leases(rig)
            run.live_leases_sent += aim(exchange, lease_picks, running, held)
            live = {lease_id for _, lease_id in running + held}
            get = job_service_pb2.GetRequest(job_id=job_id)
            cancel = job_service_pb2.CancelRequest(job_id=job_id)
            calls: list[tuple[Callable[[], Any], Any]] = [
                (
                    lambda: run.book.submit(send_submit(submit_request), submit_request),
                    submit_request,
                ),
                (lambda: run.book.batch_submit(send_batch(batch), batch), batch),
                (lambda: job_stub.Get(get, metadata=metadata, timeout=10), get),
                (lambda: job_stub.Cancel(cancel, metadata=metadata, timeout=10), cancel),
                (lambda: worker_stub.ClaimNext(claim, timeout=10), claim),
                (lambda: worker_stub.Heartbeat(heartbeat, timeout=10), heartbeat),
                (lambda: worker_stub.SetResult(result, timeout=10), result),
                (lambda: report_and_claim(exchange, live), exchange),
            ]
            for call, request in calls:
                fuzz.assert_deliberate(call, request)
                run.sent += 1

        check()
    return run


async def test_fuzzer_over_every_request_while_jobs_flow(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    rig = make_rig(settings={name: str(value) for name, value in CAPS.items()})
    for _ in range(2):
        rig.start_worker(concurrency=4)
    # Paced below the workers' capacity (8 slots of 0.3 s), so the drain is short.
    async with Load(rig, TENANT, payload(0.3), parallel=2, pause=0.2) as load:
        assert await until(lambda: len(rig.accepted) >= 20, 30)
        real = sorted(rig.accepted)
        bait = await submit_many(rig, FUZZER, BAIT, payload(), model=FUZZ_MODEL)
        run = await asyncio.to_thread(run_fuzzer, rig, real, scale(60, 1000))
    created = run.book.created
    rig.accepted.update(created)
    fuzzer_jobs = bait + created
    for job_id in fuzzer_jobs:  # no daemon runs their models: leave nothing live
        await rig.cancel(FUZZER, job_id)
    # A real job a fuzzed claim still holds is requeued when its lease expires
    # (FAULT_SETTINGS: one second), then run: the drain waits for it.
    ledger = await rig.collect({TENANT: load.ids, FUZZER: fuzzer_jobs}, timeout=scale(60, 600))

    assert run.unfenced == []
    assert_clean(ledger)
    # Not vacuous: fuzzed Submits and BatchSubmits did create jobs, and reuse keys.
    assert created and run.book.reused
    touched = run.ended | run.claimed
    assert all(ledger.finals[j].status == "completed" for j in load.ids if j not in touched)
    figures(
        figures_of(
            "fuzzer over every request, jobs flowing",
            ledger,
            run.sent,
            fuzz_submits_valid=f"{run.book.valid}/{run.book.sent}",
            fuzz_jobs_created=len(created),
            fuzz_jobs_reused=run.book.reused,
            live_leases_sent=run.live_leases_sent,
            jobs_fuzz_claimed=len(run.claimed),
            jobs_fuzz_ended=len(run.ended),
            real_jobs_fuzz_ended=len(run.ended & set(load.ids)),
        )
    )
