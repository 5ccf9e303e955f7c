"""A fuzzer over every request message while real jobs flow through the daemons.

The strategies are tests/e2e/test_fuzz.py's, with the live jobs' real ids
mixed in, so fuzzed Heartbeats, SetResults and Cancels hit jobs that are
running. No answer may be INTERNAL or UNKNOWN, and afterwards the ledger of
the real jobs (and of every job a fuzzed Submit created) keeps every
invariant: a fuzzed request changes nothing it may not.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.v1 import job_service_pb2, job_service_pb2_grpc, worker_service_pb2_grpc
from tests.e2e import test_fuzz as fuzz
from tests.faults.conftest import RigFactory, Scale
from tests.faults.rig import Figures, Load, Rig, assert_clean, figures_of, payload, until

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT, FUZZER = "acme", "fuzz"


def run_fuzzer(rig: Rig, real_ids: list[str], examples: int) -> tuple[list[str], int]:
    """Hypothesis over every RPC (sync, on this thread); the ids fuzzed Submits created
    and the number of requests sent."""
    created: list[str] = []
    sent = [0]
    lock = threading.Lock()
    job_ids = st.one_of(fuzz.ids, st.sampled_from(real_ids))
    metadata = (("x-jobgate-tenant", FUZZER),)
    with (
        grpc.insecure_channel(rig.deployment.job_target) as jobs,
        grpc.insecure_channel(rig.deployment.worker_target) as workers,
    ):
        job_stub = job_service_pb2_grpc.JobServiceStub(jobs)
        worker_stub = worker_service_pb2_grpc.WorkerServiceStub(workers)

        def submit(request: Any) -> None:
            response = job_stub.Submit(request, metadata=metadata, timeout=10)
            with lock:
                created.append(response.job.id)

        @settings(parent=fuzz.FUZZ, max_examples=examples)
        @given(
            submit_request=fuzz.submits,
            job_id=job_ids,
            claim=fuzz.claims,
            heartbeat=fuzz.heartbeats,
            result=fuzz.results,
        )
        def check(
            submit_request: Any, job_id: str, claim: Any, heartbeat: Any, result: Any
        ) -> None:
            heartbeat.job_id = result.job_id = job_id
            get = job_service_pb2.GetRequest(job_id=job_id)
            cancel = job_service_pb2.CancelRequest(job_id=job_id)
            calls: list[tuple[Callable[[], Any], Any]] = [
                (lambda: submit(submit_request), submit_request),
                (lambda: job_stub.Get(get, metadata=metadata, timeout=10), get),
                (lambda: job_stub.Cancel(cancel, metadata=metadata, timeout=10), cancel),
                (lambda: worker_stub.ClaimNext(claim, timeout=10), claim),
                (lambda: worker_stub.Heartbeat(heartbeat, timeout=10), heartbeat),
                (lambda: worker_stub.SetResult(result, timeout=10), result),
            ]
            for call, request in calls:
                fuzz.assert_deliberate(call, request)
                sent[0] += 1

        check()
    return created, sent[0]


async def test_fuzzer_over_every_request_while_jobs_flow(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    rig = make_rig()
    for _ in range(2):
        rig.start_worker(concurrency=4)
    # Paced below the workers' capacity (8 slots of 0.3 s), so the drain is short.
    async with Load(rig, TENANT, payload(0.3), parallel=2, pause=0.2) as load:
        assert await until(lambda: len(rig.accepted) >= 20, 30)
        real = sorted(rig.accepted)
        created, sent = await asyncio.to_thread(run_fuzzer, rig, real, scale(60, 1000))
    rig.accepted.update(created)
    for job_id in created:  # fuzzed models have no workers: leave nothing live
        await rig.cancel(FUZZER, job_id)
    ledger = await rig.collect({TENANT: load.ids, FUZZER: created}, timeout=scale(60, 600))

    assert_clean(ledger)
    assert all(ledger.finals[j].status == "completed" for j in load.ids)
    figures(
        figures_of(
            "fuzzer over every request, jobs flowing", ledger, sent, fuzz_jobs_created=len(created)
        )
    )
