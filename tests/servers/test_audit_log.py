"""The audit log: every transition, side effects included, logged once across replicas."""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import grpc.aio
import pytest

from jobgate.cli._servers import process as server_process
from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from serving.audit_log import MESSAGE, AuditLog
from serving.metrics import Metrics
from serving.recovery import Recovery
from serving.settings import Address, ServerSettings
from store import StoreSettings, open_store
from store.errors import StoreUnavailable
from store.memory import LocalStore
from store.model import JobEvent
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness
from tests.timings import Timings

TENANT = (("x-jobgate-tenant", "t1"),)
Transition = tuple[str, str, str]  # job_id, from, to


def transitions(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [vars(r) for r in caplog.records if r.getMessage() == MESSAGE]


def counted(caplog: pytest.LogCaptureFixture) -> Counter[Transition]:
    return Counter((r["job_id"], r["from"], r["to"]) for r in transitions(caplog))


@asynccontextmanager
async def audited(harness: Harness) -> AsyncIterator[AuditLog]:
    """The harness with its recovery loop and audit log running, the log following."""
    recovery = Recovery(harness.serving.store, harness.metrics, interval=0.05)
    audit = AuditLog(harness.serving.store, recovery.leadership)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(recovery.run(stop)), asyncio.create_task(audit.run(stop))]
    try:
        yield audit
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def following(audit: AuditLog) -> None:
    async def check() -> bool:
        return audit.following

    await assert_eventually(check)


async def logged(caplog: pytest.LogCaptureFixture, transition: Transition) -> None:
    async def check() -> bool:
        return transition in counted(caplog)

    await assert_eventually(check, message=f"{transition} not logged")


async def run_group(harness: Harness) -> tuple[str, list[str]]:
    """A group of two, max_parallel=1, run to completion; (parent id, child ids)."""
    children = [job_pb2.JobSpec(model="m"), job_pb2.JobSpec(model="m")]
    request = job_service_pb2.SubmitRequest(
        group=job_pb2.GroupSpec(children=children, max_parallel=1)
    )
    parent = (await harness.job.Submit(request, metadata=TENANT, timeout=5)).job
    child_ids = [c.id for c in sorted(parent.children, key=lambda c: c.child_index)]
    for _ in child_ids:
        [claimed] = await harness.claim()
        await harness.complete(claimed)
    return parent.id, child_ids


def assert_group_logged_once(caplog: pytest.LogCaptureFixture, parent: str, second: str) -> None:
    seen = counted(caplog)
    assert seen[(second, "held", "queued")] == 1
    parent_lines = {k: n for k, n in seen.items() if k[0] == parent}
    assert parent_lines == {
        (parent, "", "queued"): 1,
        (parent, "queued", "processing"): 1,
        (parent, "processing", "completed"): 1,
    }
    for line in transitions(caplog):
        assert line["tenant"] == "t1"
        assert line["event_id"]


@pytest.fixture
def audit_caplog(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="jobgate.audit")
    return caplog


async def test_group_side_effects_are_logged_once_each(
    harness: Harness, audit_caplog: pytest.LogCaptureFixture
) -> None:
    async with audited(harness) as audit:
        await following(audit)
        parent, [_, second] = await run_group(harness)
        await logged(audit_caplog, (parent, "processing", "completed"))
    assert_group_logged_once(audit_caplog, parent, second)


async def test_a_transition_line_carries_the_event_fields(
    harness: Harness, audit_caplog: pytest.LogCaptureFixture
) -> None:
    async with audited(harness) as audit:
        await following(audit)
        job = await harness.submit(metadata=TENANT)
        await logged(audit_caplog, (job.id, "", "queued"))
    [line] = transitions(audit_caplog)
    expected = {"job_id": job.id, "parent_job_id": "", "tenant": "t1", "model": "m"}
    assert {k: line[k] for k in expected} == expected
    assert (line["priority"], line["attempts"], line["worker_id"]) == ("batch", 0, "")
    assert (line["error_code"], line["from"], line["to"]) == ("", "", "queued")
    assert line["event_time"].startswith(str(time.gmtime().tm_year))


async def test_events_before_the_leadership_are_not_logged(
    harness: Harness, audit_caplog: pytest.LogCaptureFixture
) -> None:
    await harness.submit()  # before this replica leads
    async with audited(harness) as audit:
        await following(audit)
        later = await harness.submit()
        await logged(audit_caplog, (later.id, "", "queued"))
    assert [line["job_id"] for line in transitions(audit_caplog)] == [later.id]


async def test_a_replica_that_does_not_lead_logs_nothing(
    harness: Harness, audit_caplog: pytest.LogCaptureFixture
) -> None:
    audit = AuditLog(harness.serving.store, lambda: None)
    stop = asyncio.Event()
    task = asyncio.create_task(audit.run(stop))
    await harness.submit()
    async with audited(harness) as leader:  # a leader logs, so the stream moved
        await following(leader)
        job = await harness.submit()
        await logged(audit_caplog, (job.id, "", "queued"))
    stop.set()
    await task
    assert not audit.following
    assert len(transitions(audit_caplog)) == 1


async def test_stop_ends_a_blocked_read(harness: Harness, timings: Timings) -> None:
    audit = AuditLog(harness.serving.store, lambda: 1, block=timedelta(seconds=30))
    stop = asyncio.Event()
    task = asyncio.create_task(audit.run(stop))
    await following(audit)
    started = time.monotonic()
    stop.set()
    await asyncio.wait_for(task, 20)  # the read blocks for 30 s: 20 is still "not waited out"
    timings("audit log: a stop ends a blocked read", time.monotonic() - started)


class Term:
    """A leadership callable a test switches by hand."""

    def __init__(self) -> None:
        self.value: int | None = 1

    def __call__(self) -> int | None:
        return self.value


@asynccontextmanager
async def running(audit: AuditLog) -> AsyncIterator[AuditLog]:
    stop = asyncio.Event()
    task = asyncio.create_task(audit.run(stop))
    try:
        yield audit
    finally:
        stop.set()
        await task


async def test_a_lapse_within_the_term_resumes_from_the_cursor(
    harness: Harness, audit_caplog: pytest.LogCaptureFixture
) -> None:
    term = Term()
    async with running(AuditLog(harness.serving.store, term)) as audit:
        await following(audit)
        term.value = None
        job = await harness.submit()
        term.value = 1
        await logged(audit_caplog, (job.id, "", "queued"))


async def test_a_new_term_starts_from_the_newest_event(
    harness: Harness, audit_caplog: pytest.LogCaptureFixture
) -> None:
    term = Term()
    async with running(AuditLog(harness.serving.store, term)) as audit:
        await following(audit)
        term.value = None
        await harness.submit()  # while another replica may have led
        term.value = 2
        await following(audit)
        later = await harness.submit()
        await logged(audit_caplog, (later.id, "", "queued"))
    assert [line["job_id"] for line in transitions(audit_caplog)] == [later.id]


class ScriptedLeadership(LocalStore):
    """acquire_leadership answers from a script."""

    def __init__(self, *answers: bool) -> None:
        super().__init__(StoreSettings())
        self.answers = list(answers)

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        return self.answers.pop(0)


async def _terms(store: ScriptedLeadership) -> list[int | None]:
    await store.open()
    recovery = Recovery(store, Metrics())
    terms = []
    while store.answers:
        await recovery.step()
        terms.append(recovery.leadership())
    await store.close()
    return terms


async def test_a_renewed_leadership_keeps_its_term() -> None:
    assert await _terms(ScriptedLeadership(True, True)) == [1, 1]


async def test_a_leadership_taken_again_after_a_refusal_is_a_new_term() -> None:
    assert await _terms(ScriptedLeadership(True, False, True)) == [1, None, 2]


class FlakyStore(LocalStore):
    """events() raises StoreUnavailable while `down` is set."""

    def __init__(self) -> None:
        super().__init__(StoreSettings())
        self.down = False
        self.failed_reads = 0

    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[JobEvent]:
        if self.down:
            self.failed_reads += 1
            raise StoreUnavailable("events: connection refused")
        return await super().events(after, count, block)


async def test_an_unreachable_store_pauses_the_log_once_then_it_resumes(
    make_harness: MakeHarness, audit_caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore()
    harness = await make_harness(store=store)
    audit = AuditLog(harness.serving.store, lambda: 1, block=timedelta(seconds=0.05))
    stop = asyncio.Event()
    task = asyncio.create_task(audit.run(stop))
    try:
        await following(audit)
        store.down = True

        async def failed_twice() -> bool:
            return store.failed_reads >= 2

        await assert_eventually(failed_twice)
        job = await harness.submit()
        store.down = False
        await logged(audit_caplog, (job.id, "", "queued"))
    finally:
        stop.set()
        await task
    messages = [r.getMessage() for r in audit_caplog.records]
    assert len([m for m in messages if m.startswith("audit log paused")]) == 1
    assert "audit log resumed" in messages


async def _replica(
    make_harness: MakeHarness, url: str, partition: str, partitions: int = 1
) -> Harness:
    store = open_store(url, StoreSettings(), partition=partition, partitions=partitions)
    return await make_harness(settings=ServerSettings(redis_url=url), store=store)


@pytest.mark.redis
@pytest.mark.parametrize("partitions", [1, 3])
async def test_two_redis_replicas_log_each_transition_once(
    make_harness: MakeHarness,
    redis_server: RedisServer,
    partition: str,
    audit_caplog: pytest.LogCaptureFixture,
    partitions: int,
) -> None:
    # on 3 partitions the group lives in one and the log reads the merged streams
    first = await _replica(make_harness, redis_server.url, partition, partitions)
    second = await _replica(make_harness, redis_server.url, partition, partitions)
    async with audited(first) as one, audited(second) as two:

        async def one_follows() -> bool:
            return one.following or two.following

        await assert_eventually(one_follows)
        parent, [_, child] = await run_group(second)
        await logged(audit_caplog, (parent, "processing", "completed"))
        assert [one.following, two.following].count(True) == 1
    assert_group_logged_once(audit_caplog, parent, child)


async def test_a_server_process_logs_transitions_with_log_transitions_on(
    audit_caplog: pytest.LogCaptureFixture,
) -> None:
    loopback = Address("127.0.0.1", 0)
    settings = ServerSettings(listen=loopback, worker_listen=loopback, log_transitions=True)
    process = server_process("serve", settings, out=io.StringIO(), install_signals=False)
    running = asyncio.create_task(process.run())
    try:
        await asyncio.wait_for(process.started.wait(), 5)
        await assert_eventually(_has_message(audit_caplog, "audit log following"))
        job_address = next(item.address for item in process.listeners if item.name == "job")
        async with grpc.aio.insecure_channel(str(job_address)) as channel:
            stub = job_service_pb2_grpc.JobServiceStub(channel)
            request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m"))
            job = (await stub.Submit(request, timeout=5)).job
        await logged(audit_caplog, (job.id, "", "queued"))
    finally:
        process.request_stop()
        assert await asyncio.wait_for(running, 15) == 0


def _has_message(caplog: pytest.LogCaptureFixture, message: str) -> Callable[[], Any]:
    async def check() -> bool:
        return any(r.getMessage() == message for r in caplog.records)

    return check


async def test_a_server_process_logs_no_transitions_by_default(
    audit_caplog: pytest.LogCaptureFixture,
) -> None:
    loopback = Address("127.0.0.1", 0)
    settings = ServerSettings(listen=loopback, worker_listen=loopback)
    process = server_process("serve", settings, out=io.StringIO(), install_signals=False)
    running = asyncio.create_task(process.run())
    try:
        await asyncio.wait_for(process.started.wait(), 5)
        assert process.serving is not None
        store = process.serving.store
        rounds = 0
        recover = store.recover

        async def counted() -> Any:
            nonlocal rounds
            rounds += 1
            return await recover()

        store.recover = counted  # type: ignore[method-assign]
        job_address = next(item.address for item in process.listeners if item.name == "job")
        async with grpc.aio.insecure_channel(str(job_address)) as channel:
            stub = job_service_pb2_grpc.JobServiceStub(channel)
            request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m"))
            await stub.Submit(request, timeout=5)

        async def led_twice() -> bool:  # the process surely holds the leadership
            return rounds >= 2

        await assert_eventually(led_twice, timeout=10)
        messages = {record.getMessage() for record in audit_caplog.records}
        assert "audit log following" not in messages  # the stream is not read a second time
        assert "job transition" not in messages
    finally:
        process.request_stop()
        assert await asyncio.wait_for(running, 15) == 0
