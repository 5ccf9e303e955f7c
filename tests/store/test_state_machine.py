"""LocalStore and RedisStore driven side by side by hypothesis: they must agree.

A RuleBasedStateMachine submits, claims, heartbeats, finishes, cancels and
expires jobs on both stores at once, maps each store's ids to one logical
job, and after every step checks that both report the same status,
attempts, error code and queue position, and that the invariants hold: no
job is lost, a claim never hands out a job that is not QUEUED (at most one
live lease), attempts never decrease, and a terminal status is final.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from store import Store, StoreError, StoreSettings, fields, open_store
from store.memory import LocalStore
from store.model import (
    TERMINAL_STATUSES,
    GroupSpec,
    Job,
    JobEvent,
    JobKind,
    JobSpec,
    JobStatus,
    Priority,
    SubmitRequest,
)
from store.redis import RedisStore
from store.redis import connection as redis_connection
from tests.redis_server import RedisServer

T = TypeVar("T")

TENANT = "twins"
MODELS = ("a", "b")
LEASE = timedelta(seconds=0.1)
SETTINGS = StoreSettings(
    lease_timeout=LEASE,
    max_attempts=2,
    retry_backoff_base=timedelta(milliseconds=5),
    retry_backoff_max=timedelta(milliseconds=20),
)


@dataclass
class Twin:
    """One logical job: its id in each store and the leases each claim gave it."""

    ids: tuple[str, str]
    kind: JobKind
    leases: list[tuple[str, str]] = field(default_factory=list)


Outcome = tuple[Any, Any]


class StoreTwins(RuleBasedStateMachine):
    redis_url = ""  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.stores: tuple[Store, Store] = (
            LocalStore(SETTINGS),
            open_store(self.redis_url, SETTINGS, partition=f"sm{uuid.uuid4().hex[:10]}"),
        )
        for store in self.stores:
            self.run(store.open())
        self.twins: list[Twin] = []
        self.logical: dict[str, int] = {}  # either store's job id -> index in twins
        self.seen: dict[int, tuple[JobStatus, int]] = {}
        self.backing_off: set[int] = set()
        self.lease_deadline = 0.0
        self.backoff_deadline = 0.0

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await awaitable

        return self.loop.run_until_complete(wrapped())

    def both(self, call: Callable[[Store], Awaitable[Any]]) -> Outcome:
        """Run one operation on each store; an expected StoreError is an outcome too."""
        results: list[Any] = []
        for store in self.stores:
            try:
                results.append(self.run(call(store)))
            except StoreError as error:
                results.append(error)
        local, redis = results
        if isinstance(local, StoreError) or isinstance(redis, StoreError):
            assert type(local) is type(redis), f"local {local!r} vs redis {redis!r}"
        return local, redis

    def teardown(self) -> None:
        for store in self.stores:
            self.run(store.close())
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    # -- bookkeeping ----------------------------------------------------------------

    def register(self, local: Job, redis: Job) -> int:
        index = len(self.twins)
        self.twins.append(Twin((local.id, redis.id), local.kind))
        self.logical[local.id] = self.logical[redis.id] = index
        return index

    def same_job(self, local: Job, redis: Job) -> int:
        index = self.logical[local.id]
        assert self.logical[redis.id] == index, "the stores picked different jobs"
        return index

    def job_call(self, index: int, call: Callable[[Store, str], Awaitable[Any]]) -> Outcome:
        twin = self.twins[index]
        ids = iter(twin.ids)
        return self.both(lambda store: call(store, next(ids)))

    def lease_call(
        self, index: int, which: int, call: Callable[[Store, str, str], Awaitable[Any]]
    ) -> Outcome:
        twin = self.twins[index]
        pairs = [*twin.leases, ("bogus", "bogus")]
        local_lease, redis_lease = pairs[which % len(pairs)]
        leases = iter((local_lease, redis_lease))
        ids = iter(twin.ids)
        return self.both(lambda store: call(store, next(ids), next(leases)))

    def note_lease(self, expire_time: float) -> None:
        self.lease_deadline = max(self.lease_deadline, expire_time)

    # -- rules ---------------------------------------------------------------------------

    @rule(
        model=st.sampled_from(MODELS),
        priority=st.sampled_from(list(Priority)),
        key=st.sampled_from(["", "", "k1", "k2"]),
        payload=st.sampled_from([b"x", b"y"]),
    )
    def submit(self, model: str, priority: Priority, key: str, payload: bytes) -> None:
        request = SubmitRequest(
            tenant=TENANT,
            work=JobSpec(model=model, payload=payload),
            priority=priority,
            idempotency_key=key,
        )
        local, redis = self.both(lambda store: store.submit(request))
        if isinstance(local, StoreError):
            return
        assert local.reused == redis.reused
        if local.reused:
            self.same_job(local.job, redis.job)
        else:
            self.register(local.job, redis.job)

    @rule(
        size=st.integers(1, 3),
        max_parallel=st.integers(0, 2),
        model=st.sampled_from(MODELS),
        key=st.sampled_from(["", "g1"]),
    )
    def submit_group(self, size: int, max_parallel: int, model: str, key: str) -> None:
        children = tuple(JobSpec(model=model, payload=bytes([i])) for i in range(size))
        request = SubmitRequest(
            tenant=TENANT,
            work=GroupSpec(children, max_parallel=max_parallel),
            idempotency_key=key,
        )
        local, redis = self.both(lambda store: store.submit(request))
        if isinstance(local, StoreError):
            return
        assert local.reused == redis.reused
        if local.reused:
            self.same_job(local.job, redis.job)
            return
        self.register(local.job, redis.job)
        assert len(local.job.children) == len(redis.job.children) == size
        for mine, theirs in zip(local.job.children, redis.job.children, strict=True):
            index = len(self.twins)
            self.twins.append(Twin((mine.id, theirs.id), JobKind.CHILD))
            self.logical[mine.id] = self.logical[theirs.id] = index

    @rule(models=st.sets(st.sampled_from(MODELS), min_size=1), max_jobs=st.integers(1, 3))
    def claim(self, models: set[str], max_jobs: int) -> None:
        wanted = sorted(models)
        local, redis = self.both(lambda store: store.claim("w", wanted, max_jobs=max_jobs))
        assert len(local) == len(redis), f"local claimed {len(local)}, redis {len(redis)}"
        for mine, theirs in zip(local, redis, strict=True):
            index = self.same_job(mine.job, theirs.job)
            assert self.seen[index][0] is JobStatus.QUEUED, "claimed a job that was not QUEUED"
            assert mine.job.attempts == theirs.job.attempts
            self.twins[index].leases.append((mine.lease_id, theirs.lease_id))
            self.note_lease(max(mine.lease_expire_time, theirs.lease_expire_time).timestamp())

    @precondition(lambda self: self.twins)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.twins) - 1))
        which = data.draw(st.integers(-2, 2))
        progress = data.draw(st.sampled_from([0.0, 0.5]))
        local, redis = self.lease_call(
            index, which, lambda store, job, lease: store.heartbeat(job, lease, progress, "s")
        )
        if not isinstance(local, StoreError):
            assert local.cancel_requested == redis.cancel_requested
            if not local.cancel_requested:
                self.note_lease(max(local.lease_expire_time, redis.lease_expire_time).timestamp())

    @precondition(lambda self: self.twins)
    @rule(data=st.data())
    def set_result(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.twins) - 1))
        which = data.draw(st.integers(-2, 2))
        status, retryable = data.draw(
            st.sampled_from(
                [(JobStatus.COMPLETED, False), (JobStatus.FAILED, False), (JobStatus.FAILED, True)]
            )
        )
        local, redis = self.lease_call(
            index,
            which,
            lambda store, job, lease: store.set_result(
                job, lease, status, error_code="E", retryable=retryable
            ),
        )
        if isinstance(local, StoreError):
            return
        assert (local.status, local.attempts) == (redis.status, redis.attempts)
        if retryable and local.status is JobStatus.QUEUED:
            self.backing_off.add(index)
            self.backoff_deadline = time.time() + SETTINGS.retry_backoff_max.total_seconds()

    @precondition(lambda self: self.twins)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.twins) - 1))
        local, redis = self.job_call(index, lambda store, job: store.cancel(TENANT, job))
        assert local.cancelled == redis.cancelled
        assert local.job.status == redis.job.status

    @rule()
    def expire(self) -> None:
        """Let every lease and backoff run out, then recover on both stores."""
        until = max(self.lease_deadline, self.backoff_deadline) + 0.02
        self.run(asyncio.sleep(max(0.0, until - time.time())))
        local, redis = self.both(lambda store: store.recover())

        def steps(events: list[Any]) -> list[tuple[int, Any, Any, str]]:
            return sorted(
                (self.logical[e.job_id], e.from_status, e.to_status, e.error_code) for e in events
            )

        assert steps(local) == steps(redis)
        self.backing_off.clear()

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def stores_agree_and_nothing_is_lost(self) -> None:
        queued: list[int] = []
        processing: list[int] = []
        live = 0
        for index, twin in enumerate(self.twins):
            local, redis = self.job_call(index, lambda store, job: store.get(TENANT, job))
            assert not isinstance(local, StoreError), f"job {index} lost: {local!r}"
            assert self.comparable(local) == self.comparable(redis), f"job {index} differs"
            if index in self.seen:
                status, attempts = self.seen[index]
                assert local.attempts >= attempts, "attempts decreased"
                if status in TERMINAL_STATUSES:
                    assert local.status is status, "a terminal status changed"
            self.seen[index] = (local.status, local.attempts)
            if twin.kind is not JobKind.GROUP:
                live += local.status not in TERMINAL_STATUSES
                if local.status is JobStatus.QUEUED and index not in self.backing_off:
                    queued.append(index)
                if local.status is JobStatus.PROCESSING:
                    processing.append(index)
        self.check_live_counters(live)
        for store in self.stores:
            depths = self.run(store.queue_depths())
            assert sum(depths.values()) == len(queued), "a queued job is not claimable"
            flying = self.run(store.in_flight())
            assert sum(flying.values()) == len(processing), "in_flight is off"

    @invariant()
    def stores_wrote_the_same_audit_trail(self) -> None:
        """Per job, the same transitions with the same fields, in the same order."""
        local, redis = self.both(lambda store: store.events(after="0", count=1_000_000))
        assert self.trails(local) == self.trails(redis)

    def trails(self, events: list[JobEvent]) -> dict[int, list[tuple[object, ...]]]:
        trails: dict[int, list[tuple[object, ...]]] = {}
        for e in events:
            parent = self.logical.get(e.parent_job_id, -1)
            step = (parent, e.tenant, e.model, e.priority, e.from_status, e.to_status,
                    e.attempts, e.worker_id, e.error_code)  # fmt: skip
            trails.setdefault(self.logical[e.job_id], []).append(step)
        return trails

    def comparable(self, job: Job) -> dict[str, object]:
        """Every field of the Job (store/fields.py), with each store's ids as the
        logical job and times as set or not (the stores' clocks differ)."""
        view: dict[str, object] = {}
        for f in fields.JOB_FIELDS:
            value: object = getattr(job, f.name)
            if f.name in ("id", "parent_id"):
                value = self.logical.get(str(value), value)
            elif f.kind in (fields.Kind.TIME, fields.Kind.OPTIONAL_TIME):
                value = value is not None
            elif f.name == "progress":
                value = round(float(str(value)), 9)
            elif f.name == "children":
                value = tuple(
                    (self.logical[c.id], c.child_index, c.status, c.error_code)
                    for c in job.children
                )
            view[f.name] = value
        return view

    def check_live_counters(self, live: int) -> None:
        """Admission reads these counters: a drift would one day refuse every submit."""
        local, redis = self.stores
        assert isinstance(local, LocalStore) and isinstance(redis, RedisStore)
        assert (
            local.engine.state.live_by_tenant.get(TENANT, 0),
            local.engine.state.live_total,
        ) == (live, live)
        by_tenant = self.run(redis.engine.connection.rpc.hget(redis.engine.owner.keys.live, TENANT))
        total = self.run(redis.engine.connection.rpc.get(redis.engine.owner.keys.live_total))
        assert (int(by_tenant or 0), int(total or 0)) == (live, live)


@pytest.mark.redis
@pytest.mark.timeout(300)  # a passing run takes ~20 s; shrinking a failure takes longer
def test_local_and_redis_stores_agree_on_random_histories(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This compares semantics, not failure detection: a loaded CI machine
    # that stalls one Redis reply past the 1 s socket timeout would make only
    # the Redis side raise StoreUnavailable and read as a disagreement.
    monkeypatch.setattr(redis_connection, "SOCKET_TIMEOUT", 30.0)
    monkeypatch.setattr(redis_connection, "CONNECT_TIMEOUT", 30.0)
    StoreTwins.redis_url = redis_server.url
    run_state_machine_as_test(
        StoreTwins,
        settings=settings(
            max_examples=25,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            # a CI failure prints @reproduce_failure, so it can be replayed
            print_blob=True,
        ),
    )
