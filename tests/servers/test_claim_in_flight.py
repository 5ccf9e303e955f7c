"""A ClaimNext whose caller is gone while the store claims never leaves a job leased to nobody.

The servers run on RedisStore behind a FaultProxy (tests/proxy.py) that
holds the claim script's reply back: the script ran (attempts+1, lease
written) and the caller goes away (cancel, deadline, drain) before the
answer arrives. The job must be claimable again at once, attempts restored,
not after a full lease.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import grpc
import pytest

from jobgate.v1 import worker_service_pb2
from serving.settings import ServerSettings
from store import StoreSettings, open_store
from store.memory import LocalStore
from store.model import ClaimedJob, JobStatus
from store.redis_scripts import read_script
from tests.helpers import assert_eventually
from tests.proxy import FaultProxy
from tests.redis_server import RedisServer
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, seconds

CLAIM = read_script("claim").sha.encode()


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


async def _given_back(harness: Harness, job_id: str) -> None:
    async def check() -> bool:
        # read from the store: a draining server refuses Get
        job = await harness.serving.store.get("default", job_id)
        return job.status is JobStatus.QUEUED and job.attempts == 0

    await assert_eventually(check)


@pytest.mark.redis
async def test_a_claim_cancelled_mid_flight_gives_its_job_back(
    harness: Harness, proxy: FaultProxy
) -> None:
    job = await harness.submit()
    fault = proxy.delay_reply(CLAIM, 0.5)
    call = harness.worker.ClaimNext(_claim_request(), timeout=5)

    async def script_ran() -> bool:
        return fault.hits == 1

    await assert_eventually(script_ran)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _given_back(harness, job.id)
    [again] = await harness.claim()
    assert (again.job.id, again.job.attempts) == (job.id, 1)


@pytest.mark.redis
async def test_a_claim_answered_after_its_deadline_gives_its_job_back(
    harness: Harness, proxy: FaultProxy
) -> None:
    job = await harness.submit()
    proxy.delay_reply(CLAIM, 0.8)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await harness.worker.ClaimNext(_claim_request(), timeout=0.3)
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


class LateAnswerStore(LocalStore):
    """Claims at once, but its answer reaches the servicer only when `answer` is set,
    even if the call was cancelled meanwhile (a store answer already on its way)."""

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
    ) -> list[ClaimedJob]:
        claimed = await super().claim(worker_id, models, max_jobs, wait)
        self.claimed.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self.answer.wait()
        return claimed


async def _local_given_back(store: LocalStore, job_id: str) -> None:
    async def check() -> bool:
        job = await store.get("default", job_id)
        return job.status is JobStatus.QUEUED and job.attempts == 0

    await assert_eventually(check)


async def test_a_claim_cancelled_as_the_store_answers_gives_its_job_back(
    make_harness: MakeHarness,
) -> None:
    store = LateAnswerStore(StoreSettings())
    harness = await make_harness(store=store)
    job = await harness.submit()
    call = harness.worker.ClaimNext(_claim_request(), timeout=5)
    await asyncio.wait_for(store.claimed.wait(), 5)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _local_given_back(store, job.id)


async def test_a_claim_answered_after_its_deadline_on_local_store_gives_its_job_back(
    make_harness: MakeHarness,
) -> None:
    store = LateAnswerStore(StoreSettings())
    harness = await make_harness(store=store)
    job = await harness.submit()
    call = harness.worker.ClaimNext(_claim_request(), timeout=0.5)
    await asyncio.wait_for(store.claimed.wait(), 5)
    with pytest.raises(grpc.aio.AioRpcError):
        await call
    store.answer.set()
    await _local_given_back(store, job.id)
