"""A claim whose caller is gone while the store claims never leaves a job leased to nobody.

Both ways to claim: ClaimNext, and ReportAndClaim (its own claim in the
report_and_claim step, and its long poll, which is ClaimNext's). The
servers run on RedisStore behind a FaultProxy (tests/proxy.py) that holds
the claiming script's reply back: the script ran (attempts+1, lease
written) and the caller goes away (cancel, deadline, drain) before the
answer arrives. The job must be claimable again at once, attempts restored,
not after a full lease. On LocalStore, LateAnswerStore holds the answer back.
Results a ReportAndClaim carried stay applied whatever becomes of its claim.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any

import grpc
import pytest

from jobgate.v1 import job_pb2, worker_service_pb2
from serving.settings import ServerSettings
from store import StoreSettings, open_store
from store.memory import LocalStore
from store.model import ClaimedJob, JobStatus, LeaseResult, ReportedAndClaimed
from store.protocol import Store
from store.redis.scripts import read_script
from tests.helpers import assert_eventually
from tests.proxy import FaultProxy, _Fault
from tests.redis_server import RedisServer
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, seconds
from tests.servers.test_report_and_claim import completed
from tests.store.conftest import claim_is_waiting

pb = worker_service_pb2
CLAIM = read_script("claim").sha.encode()
REPORT_AND_CLAIM = read_script("report_and_claim").sha.encode()


@pytest.fixture
async def proxy(redis_server: RedisServer) -> AsyncIterator[FaultProxy]:
    proxy = FaultProxy("127.0.0.1", redis_server.port)
    await proxy.start()
    yield proxy
    await proxy.close()


@pytest.fixture
async def harness(proxy: FaultProxy, make_harness: MakeHarness, partition: str) -> Harness:
    # (proxy first: it must outlive the servers' store, which closes at teardown)
    # a lease far longer than any wait below: only a release brings the job back
    store_settings = StoreSettings(lease_timeout=StoreSettings().lease_timeout * 10)
    store = open_store(proxy.url, store_settings, partition=partition)
    return await make_harness(settings=ServerSettings(redis_url=proxy.url), store=store)


def _claim_request(wait: float = 0.0) -> worker_service_pb2.ClaimNextRequest:
    return worker_service_pb2.ClaimNextRequest(worker_id="w1", models=["m"], wait=seconds(wait))


def _report_request(
    wait: float = 0.0, results: Sequence[pb.SetResultRequest] = ()
) -> pb.ReportAndClaimRequest:
    return pb.ReportAndClaimRequest(
        worker_id="w1", models=["m"], max_jobs=1, wait=seconds(wait), results=list(results)
    )


async def _script_ran(fault: _Fault) -> None:
    async def ran() -> bool:
        return fault.hits == 1

    await assert_eventually(ran)


async def _completed(store: Store, job_id: str) -> bool:
    return (await store.get("default", job_id)).status is JobStatus.COMPLETED


async def _given_back(harness: Harness, job_id: str) -> None:
    async def check() -> bool:
        # read from the store: a draining server refuses Get
        job = await harness.serving.store.get("default", job_id)
        return job.status is JobStatus.QUEUED and job.attempts == 0

    await assert_eventually(check)


Claiming = Callable[[Harness, float], Any]


def _claim_next(harness: Harness, timeout: float) -> Any:
    return harness.worker.ClaimNext(_claim_request(), timeout=timeout)


def _report_and_claim(harness: Harness, timeout: float) -> Any:
    return harness.worker.ReportAndClaim(_report_request(), timeout=timeout)


# Both ways to claim, with the script whose reply the proxy holds back.
BOTH_CALLS = pytest.mark.parametrize(
    ("claiming", "script"),
    [(_claim_next, CLAIM), (_report_and_claim, REPORT_AND_CLAIM)],
    ids=["ClaimNext", "ReportAndClaim"],
)


@pytest.mark.redis
@BOTH_CALLS
async def test_a_claim_cancelled_mid_flight_gives_its_job_back(
    harness: Harness, proxy: FaultProxy, claiming: Claiming, script: bytes
) -> None:
    job = await harness.submit()
    fault = proxy.delay_reply(script, 0.5)
    call = claiming(harness, 5)
    await _script_ran(fault)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _given_back(harness, job.id)
    [again] = await harness.claim()
    assert (again.job.id, again.job.attempts) == (job.id, 1)


@pytest.mark.redis
@BOTH_CALLS
async def test_a_claim_answered_after_its_deadline_gives_its_job_back(
    harness: Harness, proxy: FaultProxy, claiming: Claiming, script: bytes
) -> None:
    job = await harness.submit()
    proxy.delay_reply(script, 0.8)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await claiming(harness, 0.3)
    assert raised.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await _given_back(harness, job.id)


@pytest.mark.redis
async def test_a_claim_interrupted_by_the_drain_gives_its_job_back(
    harness: Harness, proxy: FaultProxy
) -> None:
    job = await harness.submit()
    fault = proxy.delay_reply(CLAIM, 0.5)
    call = asyncio.create_task(harness.claim())

    async def script_ran() -> bool:
        return fault.hits == 1

    await assert_eventually(script_ran)
    harness.serving.lifecycle.start_drain()
    assert await call == []
    await _given_back(harness, job.id)


@pytest.mark.redis
async def test_the_results_of_a_report_and_claim_cancelled_mid_flight_stay_applied(
    harness: Harness, proxy: FaultProxy
) -> None:
    done = await harness.submit()
    [claimed] = await harness.claim()
    await harness.submit()
    fault = proxy.delay_reply(REPORT_AND_CLAIM, 0.5)
    call = harness.worker.ReportAndClaim(_report_request(results=[completed(claimed)]), timeout=5)
    await _script_ran(fault)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await _completed(harness.serving.store, done.id)


async def _long_poll_whose_claim_ran(
    harness: Harness, proxy: FaultProxy
) -> tuple[Any, job_pb2.Job]:
    """A ReportAndClaim long poll woken by a new job, its claim script run, the reply held."""
    call = harness.worker.ReportAndClaim(_report_request(wait=20), timeout=30)
    await claim_is_waiting(harness.serving.store, "m")
    fault = proxy.delay_reply(CLAIM, 0.5)
    job = await harness.submit()
    await _script_ran(fault)
    return call, job


@pytest.mark.redis
async def test_a_report_and_claim_long_poll_cancelled_mid_flight_gives_its_job_back(
    harness: Harness, proxy: FaultProxy
) -> None:
    call, job = await _long_poll_whose_claim_ran(harness, proxy)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _given_back(harness, job.id)


@pytest.mark.redis
async def test_a_report_and_claim_long_poll_interrupted_by_the_drain_gives_its_job_back(
    harness: Harness, proxy: FaultProxy
) -> None:
    call, job = await _long_poll_whose_claim_ran(harness, proxy)
    harness.serving.lifecycle.start_drain()
    assert list((await call).jobs) == []
    await _given_back(harness, job.id)


class LateAnswerStore(LocalStore):
    """Claims at once, but a claim that leased jobs answers only when `answer` is set,
    even if the call was cancelled meanwhile (a store answer already on its way).

    ReportAndClaim's claim answers late the same way.
    """

    def __init__(self, settings: StoreSettings) -> None:
        super().__init__(settings)
        self.answer = asyncio.Event()
        self.claimed = asyncio.Event()

    async def claim(
        self,
        worker_id: str,
        models: Sequence[str],
        max_jobs: int = 1,
        wait: timedelta = timedelta(0),
        pool: str = "",
    ) -> list[ClaimedJob]:
        return await self._late(await super().claim(worker_id, models, max_jobs, wait, pool))

    async def report_and_claim(
        self,
        worker_id: str,
        models: Sequence[str],
        results: Sequence[LeaseResult],
        max_jobs: int,
        pool: str = "",
        settle: bool = True,
    ) -> ReportedAndClaimed:
        step = await super().report_and_claim(worker_id, models, results, max_jobs, pool, settle)
        return ReportedAndClaimed(step.results, await self._late(step.claimed))

    async def _late(self, claimed: list[ClaimedJob]) -> list[ClaimedJob]:
        if not claimed:
            return claimed
        self.claimed.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self.answer.wait()
        return claimed


async def _local_given_back(store: LocalStore, job_id: str) -> None:
    async def check() -> bool:
        job = await store.get("default", job_id)
        return job.status is JobStatus.QUEUED and job.attempts == 0

    await assert_eventually(check)


@BOTH_CALLS
async def test_a_claim_cancelled_as_the_store_answers_gives_its_job_back(
    make_harness: MakeHarness, claiming: Claiming, script: bytes
) -> None:
    store = LateAnswerStore(StoreSettings())
    harness = await make_harness(store=store)
    job = await harness.submit()
    call = claiming(harness, 5)
    await asyncio.wait_for(store.claimed.wait(), 5)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _local_given_back(store, job.id)


@BOTH_CALLS
async def test_a_claim_answered_after_its_deadline_on_local_store_gives_its_job_back(
    make_harness: MakeHarness, claiming: Claiming, script: bytes
) -> None:
    store = LateAnswerStore(StoreSettings())
    harness = await make_harness(store=store)
    job = await harness.submit()
    call = claiming(harness, 0.5)
    await asyncio.wait_for(store.claimed.wait(), 5)
    with pytest.raises(grpc.aio.AioRpcError):
        await call
    store.answer.set()
    await _local_given_back(store, job.id)


async def test_a_report_and_claim_long_poll_cancelled_as_the_store_answers_gives_its_job_back(
    make_harness: MakeHarness,
) -> None:
    store = LateAnswerStore(StoreSettings())
    harness = await make_harness(store=store)
    call = harness.worker.ReportAndClaim(_report_request(wait=20), timeout=30)
    await claim_is_waiting(store, "m")
    job = await harness.submit()
    await asyncio.wait_for(store.claimed.wait(), 5)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _local_given_back(store, job.id)


async def test_the_results_of_a_report_and_claim_cancelled_in_its_long_poll_stay_applied(
    make_harness: MakeHarness,
) -> None:
    store = LateAnswerStore(StoreSettings())
    harness = await make_harness(store=store)
    done = await harness.submit()
    store.answer.set()  # the first claim answers at once
    [claimed] = await harness.claim()
    store.answer.clear()
    request = _report_request(wait=20, results=[completed(claimed)])
    call = harness.worker.ReportAndClaim(request, timeout=30)
    await claim_is_waiting(store, "m")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await _completed(store, done.id)


async def test_a_report_and_claim_cancelled_as_the_store_answers_does_not_go_on_to_long_poll(
    make_harness: MakeHarness,
) -> None:
    store = LateAnswerStore(StoreSettings())
    harness = await make_harness(store=store)
    job = await harness.submit()
    call = harness.worker.ReportAndClaim(_report_request(wait=20), timeout=30)
    await asyncio.wait_for(store.claimed.wait(), 5)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    async def call_ended() -> bool:
        return harness.serving.lifecycle.in_flight == 0

    await assert_eventually(call_ended)
    await _local_given_back(store, job.id)
