"""A restarted durable store has what it acknowledged: records as they were, indexes rebuilt."""

from __future__ import annotations

import dataclasses
import random
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from store import IdempotencyKeyReused, QueueFull
from store.journal import DataDirRefused, Unloaded
from store.memory import LocalStore
from store.memory.state import State
from store.model import (
    ClaimedJob,
    FilterTerm,
    GroupSpec,
    JobFilter,
    JobSpec,
    JobStatus,
    Priority,
    ResultReport,
    StoreSettings,
    SubmitRequest,
)
from tests.store.conftest import MODEL, TENANT, claim_one, submit_group, submit_one
from tests.store.durable import FakeClock, journal_of, open_store, query, settings


async def _restarted(store: LocalStore, directory: Path, **kwargs: Any) -> LocalStore:
    await store.close()
    return await open_store(directory, **kwargs)


async def test_queued_jobs_keep_their_places(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    priorities = [Priority.BATCH, Priority.INTERACTIVE, Priority.BATCH, Priority.SYSTEM]
    jobs = [await submit_one(store, priority=priority) for priority in priorities]
    await claim_one(store)  # the interactive one
    before = [(await store.get(TENANT, job.id)).queue_position for job in jobs]

    store = await _restarted(store, tmp_path)
    try:
        after = [(await store.get(TENANT, job.id)).queue_position for job in jobs]
        order = [(await claim_one(store)).job.id for _ in range(3)]
    finally:
        await store.close()

    assert after == before == [1, None, 2, 0]
    assert order == [jobs[3].id, jobs[0].id, jobs[2].id]


async def test_a_lease_keeps_its_id_and_deadline(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    job = await submit_one(store)
    claimed = await claim_one(store)

    store = await _restarted(store, tmp_path)
    try:
        beat = await store.heartbeat(job.id, claimed.lease_id, 0.5, "")
        report = ResultReport(JobStatus.COMPLETED, b"done")
        recorded = await store.record_result(job.id, claimed.lease_id, report)
    finally:
        await store.close()

    assert beat.lease_expire_time >= claimed.lease_expire_time
    assert recorded.job.status is JobStatus.COMPLETED


async def test_a_lease_that_expired_while_down_is_recovered(tmp_path: Path) -> None:
    clock = FakeClock()
    store = await open_store(tmp_path, clock=clock)
    job = await submit_one(store)
    await claim_one(store)
    await store.close()
    clock.advance(StoreSettings().lease_timeout.total_seconds() + 1)

    store = await open_store(tmp_path, clock=clock)
    try:
        await store.recover()
        recovered = await store.get(TENANT, job.id)
    finally:
        await store.close()

    assert recovered.status is JobStatus.QUEUED
    assert recovered.error_code == "LEASE_EXPIRED"


async def test_idempotency_keys_survive(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    job = await submit_one(store, key="order-1", payload=b"same")

    store = await _restarted(store, tmp_path)
    try:
        again = await store.submit(
            SubmitRequest(TENANT, JobSpec(MODEL, b"same"), Priority.BATCH, "order-1")
        )
        with pytest.raises(IdempotencyKeyReused):
            await submit_one(store, key="order-1", payload=b"other")
    finally:
        await store.close()

    assert again.reused and again.job.id == job.id


async def test_a_group_releases_its_next_child_after_a_restart(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    group = await submit_group(store, 3, max_parallel=1)
    first = await claim_one(store)

    store = await _restarted(store, tmp_path)
    try:
        await store.record_result(first.job.id, first.lease_id, ResultReport(JobStatus.COMPLETED))
        second = await claim_one(store)
        parent = await store.get(TENANT, group.id)
    finally:
        await store.close()

    assert second.job.child_index == 1 and second.payload == b"child 1"
    assert parent.status is JobStatus.PROCESSING
    assert [child.status for child in parent.children] == [
        JobStatus.COMPLETED,
        JobStatus.PROCESSING,
        JobStatus.HELD,
    ]


async def test_live_caps_count_what_was_there(tmp_path: Path) -> None:
    capped = settings(max_live_total=2)
    store = await open_store(tmp_path, capped)
    await submit_one(store)
    await submit_one(store)
    await claim_one(store)

    store = await _restarted(store, tmp_path, store_settings=capped)
    try:
        with pytest.raises(QueueFull):
            await submit_one(store)
        in_flight = await store.in_flight()
    finally:
        await store.close()

    assert in_flight == {MODEL: 1}


async def test_results_survive_and_a_finished_jobs_payload_is_read_back(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    job = await submit_one(store, payload=b"the input")
    claimed = await claim_one(store)
    await store.record_result(job.id, claimed.lease_id, ResultReport(JobStatus.COMPLETED, b"out"))

    store = await _restarted(store, tmp_path)
    try:
        kept = await store.get(TENANT, job.id)
        record = store.engine.state.jobs[job.id]
        left_on_disk = isinstance(record.payload, Unloaded)
        payload = await store.payload(TENANT, job.id)
    finally:
        await store.close()

    assert kept.result == b"out" and kept.status is JobStatus.COMPLETED
    assert left_on_disk and payload == b"the input"


async def test_list_jobs_lists_the_same_jobs_after_a_restart(tmp_path: Path) -> None:
    only_failed = JobFilter((FilterTerm("status", "=", JobStatus.FAILED),))
    store = await open_store(tmp_path)
    await submit_one(store)
    await submit_one(store)
    claimed = await claim_one(store)
    await store.record_result(claimed.job.id, claimed.lease_id, ResultReport(JobStatus.FAILED))
    await submit_group(store, 2)
    every_before = await store.list_jobs(TENANT, JobFilter(), None, 10)

    store = await _restarted(store, tmp_path)
    try:
        every = await store.list_jobs(TENANT, JobFilter(), None, 10)
        failed = await store.list_jobs(TENANT, only_failed, None, 10)
    finally:
        await store.close()

    assert len(every_before.jobs) == 5  # two jobs, a group and its two children
    assert [job.id for job in every.jobs] == [job.id for job in every_before.jobs]
    assert [job.id for job in failed.jobs] == [claimed.job.id]


async def test_the_audit_trail_survives_and_goes_on(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    job = await submit_one(store)
    await claim_one(store)

    store = await _restarted(store, tmp_path)
    try:
        await store.cancel(TENANT, job.id)
        events = await store.events()
    finally:
        await store.close()

    assert [(event.id, event.to_status) for event in events] == [
        ("1", JobStatus.QUEUED),
        ("2", JobStatus.PROCESSING),
        ("3", JobStatus.CANCELLED),
    ]


async def test_a_retry_back_off_survives(tmp_path: Path) -> None:
    clock = FakeClock()
    backing_off = settings(retry_backoff_base=timedelta(seconds=10))
    store = await open_store(tmp_path, backing_off, clock)
    job = await submit_one(store)
    claimed = await claim_one(store)
    failed = ResultReport(JobStatus.FAILED, error_code="E", retryable=True)
    await store.record_result(job.id, claimed.lease_id, failed)

    store = await _restarted(store, tmp_path, store_settings=backing_off, clock=clock)
    try:
        early = await store.claim("w1", [MODEL])
        clock.advance(11)
        await store.recover()
        late = await store.claim("w1", [MODEL])
    finally:
        await store.close()

    assert early == []
    assert [item.job.id for item in late] == [job.id]


async def test_a_directory_keeps_its_fair_share_mode(tmp_path: Path) -> None:
    store = await open_store(tmp_path, settings(fair_share=False))
    await submit_one(store)
    await store.close()

    with pytest.raises(DataDirRefused, match="--fair-share off"):
        await open_store(tmp_path, settings(fair_share=True))


async def test_a_job_whose_ttl_ran_out_while_down_is_gone(tmp_path: Path) -> None:
    clock = FakeClock()
    short = settings(result_ttl=timedelta(seconds=60))
    store = await open_store(tmp_path, short, clock)
    job = await submit_one(store)
    await store.cancel(TENANT, job.id)
    await store.close()
    clock.advance(61)

    store = await open_store(tmp_path, short, clock)
    try:
        assert job.id not in store.engine.state.jobs
    finally:
        await store.close()


# -- the rule itself: after any mix of calls, the file rebuilds the same state ---------

MODELS = ("m-a", "m-b")
POOLS = ("", "gpu-a")
TENANTS = (TENANT, "globex")
WORKLOAD = settings(
    lease_timeout=timedelta(seconds=30),
    run_timeout=timedelta(seconds=100),
    queue_timeout=timedelta(seconds=300),
    result_ttl=timedelta(seconds=200),
    retry_backoff_base=timedelta(seconds=5),
    max_attempts=3,
    events_max_length=50,
)


class _Workload:
    """A seeded mix of every call a store takes, with time moving."""

    def __init__(self, store: LocalStore, clock: FakeClock, seed: int) -> None:
        self.store = store
        self.clock = clock
        self.random = random.Random(seed)
        self.jobs: list[tuple[str, str]] = []
        self.leases: list[ClaimedJob] = []

    async def run(self, steps: int) -> None:
        actions = [self.submit, self.submit_group, self.claim, self.heartbeat, self.report]
        actions += [self.cancel, self.release, self.wait]
        for _ in range(steps):
            await self.random.choice(actions)()

    async def submit(self) -> None:
        key = f"k{self.random.randrange(30)}" if self.random.random() < 0.3 else ""
        spec = JobSpec(
            self.random.choice(MODELS),
            f"p{self.random.randrange(5)}".encode(),
            pool=self.random.choice(POOLS),
        )
        priority = self.random.choice(list(Priority))
        request = SubmitRequest(
            self.random.choice(TENANTS), spec, priority, key, weight=self.random.randint(1, 3)
        )
        try:
            result = await self.store.submit(request)
        except IdempotencyKeyReused:
            return
        self.jobs.append((request.tenant, result.job.id))

    async def submit_group(self) -> None:
        children = tuple(
            JobSpec(self.random.choice(MODELS), b"c") for _ in range(self.random.randint(1, 4))
        )
        work = GroupSpec(children, max_parallel=self.random.randint(0, 2))
        result = await self.store.submit(SubmitRequest(TENANT, work))
        self.jobs.append((TENANT, result.job.id))

    async def claim(self) -> None:
        found = await self.store.claim(
            "w", list(MODELS), max_jobs=self.random.randint(1, 3), pool=self.random.choice(POOLS)
        )
        self.leases.extend(found)

    def _lease(self) -> ClaimedJob | None:
        return self.random.choice(self.leases) if self.leases else None

    async def heartbeat(self) -> None:
        lease = self._lease()
        if lease is not None:
            progress = self.random.random()
            await _refusals_ignored(
                self.store.heartbeat(lease.job.id, lease.lease_id, progress, "s")
            )

    async def report(self) -> None:
        lease = self._lease()
        if lease is None:
            return
        status = self.random.choice([JobStatus.COMPLETED, JobStatus.FAILED])
        report = ResultReport(status, b"r", retryable=self.random.random() < 0.5)
        await _refusals_ignored(self.store.record_result(lease.job.id, lease.lease_id, report))

    async def cancel(self) -> None:
        if self.jobs:
            tenant, job_id = self.random.choice(self.jobs)
            await _refusals_ignored(self.store.cancel(tenant, job_id))

    async def release(self) -> None:
        lease = self._lease()
        if lease is not None:
            await self.store.release([lease])

    async def wait(self) -> None:
        self.clock.advance(self.random.uniform(0, 40))
        await self.store.recover()


async def _refusals_ignored(call: Any) -> None:
    from store import StoreError, StoreUnavailable

    try:
        await call
    except StoreUnavailable:
        raise
    except StoreError:
        pass  # LeaseLost, JobCancelled, JobNotFound: answers, not failures


def _comparable(state: State, now: float, payload_of: Any) -> dict[str, Any]:
    """Everything a restart must rebuild, in a form two stores can be compared in."""
    records = {}
    for key, record in state.jobs.items():
        if record.expire_at is not None and record.expire_at <= now:
            continue  # dropped at load; memory drops it on the next read
        fields = dataclasses.asdict(record)
        fields["payload"] = payload_of(record)
        records[key] = fields
    positions = {
        key: state.position(record) for key, record in state.jobs.items() if key in records
    }
    return {
        "records": records,
        "positions": positions,
        "keys": {key: job for key, job in state.keys.items() if job in records},
        "live": {tenant: n for tenant, n in state.live_by_tenant.items() if n},
        "live_total": state.live_total,
        "in_flight": {model: n for model, n in state.in_flight.items() if n},
        "seq": state.seq,
        "events": state.events[-WORKLOAD.events_max_length :],
        "next_event": state.next_event,
        "index": _index_of(state, set(records)),
    }


def _index_of(state: State, kept: set[str]) -> dict[Any, list[Any]]:
    """ListJobs' runs, over the jobs a restart keeps (empty runs left out)."""
    runs: dict[Any, Any] = {**state.index.status_runs, **state.index.model_runs}
    listed = {name: [key for key in run if key[1] in kept] for name, run in runs.items()}
    return {name: keys for name, keys in listed.items() if keys}


@pytest.mark.parametrize("seed", range(6))
async def test_the_file_rebuilds_the_state_after_any_mix_of_calls(
    tmp_path: Path, seed: int
) -> None:
    clock = FakeClock()
    live = await open_store(tmp_path / "live", WORKLOAD, clock)
    copy: LocalStore | None = None
    try:
        await _Workload(live, clock, seed).run(400)
        await journal_of(live).flush()
        shutil.copytree(tmp_path / "live", tmp_path / "copy", ignore=shutil.ignore_patterns("lock"))
        copy = await open_store(tmp_path / "copy", WORKLOAD, clock)
        payload = journal_of(copy).blob

        def seen(store: LocalStore) -> dict[str, Any]:
            return _comparable(store.engine.state, clock(), lambda r: payload(r, "payload"))

        assert seen(copy) == seen(live)
        clock.advance(1000)  # every deadline falls due: the rebuilt heaps act alike
        await live.recover()
        await copy.recover()
        assert seen(copy) == seen(live)
    finally:
        await live.close()
        if copy is not None:
            await copy.close()


async def test_a_tenants_jobs_keep_their_order_after_a_crash_left_the_meta_behind(
    tmp_path: Path,
) -> None:
    # the meta values (fair-share passes) are written at most every lazy_delay: the
    # first commit writes them, the next ones leave them behind
    live = await open_store(tmp_path / "live", lazy_delay=3600)
    try:
        jobs = [await submit_one(live) for _ in range(3)]
        shutil.copytree(
            tmp_path / "live", tmp_path / "crashed", ignore=shutil.ignore_patterns("lock")
        )
    finally:
        await live.close()
    store = await open_store(tmp_path / "crashed")
    try:
        jobs.append(await submit_one(store))
        order = [(await claim_one(store)).job.id for _ in range(4)]
    finally:
        await store.close()

    assert order == [job.id for job in jobs]


async def test_a_result_is_stored_once_and_its_repeat_is_recognised_after_a_restart(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path)
    job = await submit_one(store)
    claimed = await claim_one(store)
    report = ResultReport(JobStatus.COMPLETED, b"r" * 65536)
    await store.record_result(job.id, claimed.lease_id, report)
    row_bytes = query(tmp_path, "SELECT sum(length(CAST(outcome AS BLOB))) FROM records")[0][0]

    store = await _restarted(store, tmp_path)
    try:
        repeat = await store.record_result(job.id, claimed.lease_id, report)
    finally:
        await store.close()

    assert row_bytes < 200  # the outcome keeps the result's digest, not the result
    assert repeat.applied is False and repeat.job.result == report.result
