"""ReportAndClaim on the durable embedded store: its results start no commit of their own,
they ride the next one (most often the Submit's that wakes the next claim), and the answer
still leaves only once they are committed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from jobgate.v1 import worker_service_pb2
from store import StoreSettings
from store.memory import LocalStore
from store.model import JobStatus
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, seconds
from tests.servers.test_report_and_claim import completed
from tests.store.conftest import claim_is_waiting
from tests.store.durable import fail_next_commit, journal_of, query

pb = worker_service_pb2


async def durable_harness(
    make_harness: MakeHarness, directory: Path, commit_delay: float = 0.01
) -> tuple[Harness, LocalStore]:
    # housekeeping far off: nothing but an answer's wait makes the journal commit
    store = LocalStore(
        StoreSettings(),
        data_dir=directory,
        data_sync="normal",
        housekeeping_every=3600,
        commit_delay=commit_delay,
    )
    return await make_harness(store=store), store


def report_and_wait(
    harness: Harness, claimed: pb.ClaimedJob, wait: float, max_jobs: int = 1
) -> Callable[[], Awaitable[pb.ReportAndClaimResponse]]:
    request = pb.ReportAndClaimRequest(
        worker_id="w1",
        models=["m"],
        results=[completed(claimed)],
        max_jobs=max_jobs,
        wait=seconds(wait),
    )
    return lambda: harness.worker.ReportAndClaim(request, timeout=wait + 10)


def status_in_file(directory: Path, job_id: str) -> str:
    [(status,)] = query(directory, "SELECT status FROM records WHERE id = ?", job_id)
    return str(status)


async def test_a_long_poll_that_ends_empty_answers_with_its_result_committed(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    harness, _ = await durable_harness(make_harness, tmp_path)
    job = await harness.submit()
    [claimed] = await harness.claim()

    response = await report_and_wait(harness, claimed, wait=0.2)()

    assert [answer.job_id for answer in response.results] == [job.id]
    assert list(response.jobs) == []
    assert status_in_file(tmp_path, job.id) == "completed"


async def test_the_results_of_a_long_poll_share_the_commit_of_the_submit_that_wakes_it(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    harness, store = await durable_harness(make_harness, tmp_path)
    first = await harness.submit()
    [claimed] = await harness.claim()
    journal = journal_of(store)
    before = journal.commits

    call = asyncio.ensure_future(report_and_wait(harness, claimed, wait=30)())
    await claim_is_waiting(store, "m")
    second = await harness.submit()
    response = await call

    assert [c.job.id for c in response.jobs] == [second.id]
    assert journal.commits - before == 1  # the Submit's, holding the result and the claim
    assert status_in_file(tmp_path, first.id) == "completed"
    assert status_in_file(tmp_path, second.id) == "processing"


async def test_a_report_alone_answers_with_its_result_committed(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    harness, _ = await durable_harness(make_harness, tmp_path)
    job = await harness.submit()
    [claimed] = await harness.claim()

    response = await report_and_wait(harness, claimed, wait=0, max_jobs=0)()

    assert [answer.outcome for answer in response.results] == [pb.REPORT_OUTCOME_APPLIED]
    assert status_in_file(tmp_path, job.id) == "completed"


async def test_a_report_alone_rides_the_next_commit_another_call_starts(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    # a commit delay no test waits out: only the Submit's commit can answer the report
    harness, store = await durable_harness(make_harness, tmp_path, commit_delay=3600)
    first = await harness.submit()
    [claimed] = await harness.claim()
    journal = journal_of(store)
    before = journal.commits

    call = asyncio.ensure_future(report_and_wait(harness, claimed, wait=0, max_jobs=0)())

    async def recorded() -> bool:  # in memory (no read through the store: it would commit)
        return store.engine.state.jobs[first.id].status is JobStatus.COMPLETED

    await assert_eventually(recorded, message="the result was never recorded")
    assert not call.done()
    assert status_in_file(tmp_path, first.id) == "processing"
    second = await harness.submit()
    response = await call

    assert [answer.outcome for answer in response.results] == [pb.REPORT_OUTCOME_APPLIED]
    assert journal.commits - before == 1  # the Submit's
    assert status_in_file(tmp_path, first.id) == "completed"
    assert status_in_file(tmp_path, second.id) == "queued"


async def test_a_result_whose_commit_failed_is_counted_once_when_the_worker_sends_it_again(
    make_harness: MakeHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness, store = await durable_harness(make_harness, tmp_path)
    await harness.submit()
    [claimed] = await harness.claim()
    fail_next_commit(journal_of(store), monkeypatch)
    report = report_and_wait(harness, claimed, wait=0, max_jobs=0)

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await report()
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE

    async def applied_again() -> bool:  # once memory is rebuilt from the file
        try:
            response = await report()
        except grpc.aio.AioRpcError:
            return False
        return [answer.outcome for answer in response.results] == [pb.REPORT_OUTCOME_APPLIED]

    await assert_eventually(applied_again, message="the resent result was never applied")
    labels = {"model": "m", "priority": "batch", "status": "completed"}
    assert await harness.value("jobgate_jobs_finished_total", labels) == 1


async def test_a_result_whose_long_poll_the_worker_cuts_short_is_still_counted(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    harness, store = await durable_harness(make_harness, tmp_path)
    await harness.submit()
    [claimed] = await harness.claim()
    call = asyncio.ensure_future(report_and_wait(harness, claimed, wait=30)())
    await claim_is_waiting(store, "m")

    call.cancel()  # the worker stops: its result stays applied and is committed
    labels = {"model": "m", "priority": "batch", "status": "completed"}

    async def counted() -> bool:
        return await harness.value("jobgate_jobs_finished_total", labels) == 1

    await assert_eventually(counted, message="the result was never counted")

    async def committed() -> bool:
        return status_in_file(tmp_path, claimed.job.id) == "completed"

    await assert_eventually(committed, message="the result was never committed")
