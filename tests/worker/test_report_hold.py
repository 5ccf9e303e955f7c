"""Results held behind a claim that a backlog should answer at once (REPORT_HOLD).

After an answer that filled every slot it asked for, the daemon expects the
next claim back promptly: a result that finishes meanwhile waits to ride
the call after it instead of going in a ReportAndClaim of its own, unless
the claim is still out after REPORT_HOLD (then it is a real long poll).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import pytest

from jobgate import JobContext
from jobgate.worker import Worker, _daemon
from tests.helpers import assert_eventually
from tests.worker.conftest import running_worker
from tests.worker.fake_worker_service import FakeWorkerService, start

Fake = tuple[FakeWorkerService, str]
#: Long enough that only the daemon, never the poll's end, sends a result here.
LONG_POLL = 30.0


@pytest.fixture
async def fake() -> AsyncIterator[Fake]:
    service = FakeWorkerService(lease=30.0)
    server, target = await start(service)
    yield service, target
    await server.stop(grace=None)


class Gates:
    """One threading.Event per job id that its handler waits on."""

    def __init__(self, *job_ids: str) -> None:
        self.events = {job_id: threading.Event() for job_id in job_ids}

    def handler(self, ctx: JobContext) -> str:
        self.events[ctx.job_id].wait(10)
        return "ok"

    def release(self, job_id: str) -> None:
        self.events[job_id].set()


def two_slots(target: str, gates: Gates) -> AbstractAsyncContextManager[Worker]:
    return running_worker(target, "m", gates.handler, concurrency=2, claim_wait=LONG_POLL)


def carried_by_claims(service: FakeWorkerService) -> list[str]:
    """Results that rode a call which also claimed."""
    return [result.job_id for seen in service.claims for result in seen.request.results]


def results_sent(service: FakeWorkerService) -> list[str]:
    return [seen.request.job_id for seen in service.results]


async def second_result_pending(service: FakeWorkerService, gates: Gates) -> None:
    """J1 and J2 claimed in one full answer; J1's result rides an open long poll; J2 ends."""
    service.add_job("J1")
    service.add_job("J2")
    gates.release("J1")

    async def first_result_sent() -> bool:
        return results_sent(service) == ["J1"]

    await assert_eventually(first_result_sent)
    gates.release("J2")


async def test_a_result_waits_for_a_claim_a_backlog_should_answer(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, target = fake
    monkeypatch.setattr(_daemon, "REPORT_HOLD", 30.0)  # the hold never runs out here
    gates = Gates("J1", "J2", "J3")
    async with two_slots(target, gates) as worker:
        await second_result_pending(service, gates)

        async def held() -> bool:
            return len(worker._reports) == 1

        await assert_eventually(held)
        service.add_job("J3")  # the open claim returns; J2's result rides the next call

        async def second_result_sent() -> bool:
            return results_sent(service) == ["J1", "J2"]

        await assert_eventually(second_result_sent)
        carrier = service.claims[-1].request
        assert [result.job_id for result in carrier.results] == ["J2"]
        assert carrier.max_jobs > 0
        assert service.calls["ReportAndClaim"] == 3  # J1+J2, J1's result -> J3, J2's result
        gates.release("J3")


async def test_a_held_result_goes_on_its_own_once_the_claim_turns_out_a_long_poll(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, target = fake
    # Long enough that J2 surely finishes inside the hold, even on a busy machine.
    monkeypatch.setattr(_daemon, "REPORT_HOLD", 2.0)
    gates = Gates("J1", "J2")
    async with two_slots(target, gates) as worker:
        await second_result_pending(service, gates)

        async def held() -> bool:
            return len(worker._reports) == 1

        await assert_eventually(held)  # finished inside the hold: not sent yet

        async def second_result_sent() -> bool:
            return results_sent(service) == ["J1", "J2"]

        # the hold runs out while the long poll stays open (LONG_POLL): J2 goes alone
        await assert_eventually(second_result_sent, timeout=10)
        assert "J2" not in carried_by_claims(service)
        assert service.calls["ReportAndClaim"] == 3  # J1+J2, J1's result (open), J2's alone


async def test_results_after_an_answer_short_of_its_slots_go_at_once(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, target = fake
    monkeypatch.setattr(_daemon, "REPORT_HOLD", 30.0)  # would hold, if it applied
    gates = Gates("J1")
    async with two_slots(target, gates):
        service.add_job("J1")  # one job for two slots: the queue is empty

        async def polling_again() -> bool:
            return len(service.claims) == 2

        await assert_eventually(polling_again)
        gates.release("J1")

        async def result_sent() -> bool:
            return results_sent(service) == ["J1"]

        await assert_eventually(result_sent)
        assert service.calls["ReportAndClaim"] == 3  # J1, the open long poll, J1's alone
