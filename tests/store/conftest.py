"""Store fixtures: every contract test runs on LocalStore, on LocalStore kept in a data
directory ("durable": store/memory/durable.py, a real SQLite file in a tmp dir), on
RedisStore (real redis-server) and on a RedisStore of three partitions on the same
redis-server ("redis3").

`store` is a store with the default settings; `make_store(**overrides)` makes
one with other StoreSettings (short leases, small caps...). Each store gets
its own partition and is closed after the test.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import pytest
from redis.asyncio import Redis

from store import Store, StoreSettings, open_store
from store.model import (
    ClaimedJob,
    GroupSpec,
    Job,
    JobSpec,
    JobStatus,
    Priority,
    SubmitRequest,
)
from store.redis import engine as redis_engine
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer

MakeStore = Callable[..., Awaitable[Store]]


@pytest.fixture(
    params=[
        "memory",
        "durable",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis3", marks=pytest.mark.redis),
    ]
)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


#: --redis-partitions of each backend ("redis3": the partitioned store).
PARTITIONS = {"memory": 1, "durable": 1, "redis": 1, "redis3": 3}


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """None for LocalStore; the session redis-server's URL for RedisStore."""
    if backend in ("memory", "durable"):
        return None
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain client of the session redis-server, to look at keys directly."""
    client = Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def make_store(
    store_url: str | None, partition: str, backend: str, tmp_path: Path
) -> AsyncIterator[MakeStore]:
    opened: list[Store] = []
    numbers = itertools.count()

    async def make(**overrides: Any) -> Store:
        settings = dataclasses.replace(StoreSettings(), **overrides)
        name = f"{partition}-{next(numbers)}"
        data_dir = str(tmp_path / name) if backend == "durable" else None
        store = open_store(
            store_url,
            settings,
            partition=name,
            partitions=PARTITIONS[backend],
            data_dir=data_dir,
            data_sync="normal",  # the contract is the same; the tests need no fsync
        )
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(make_store: MakeStore) -> Store:
    return await make_store()


@pytest.fixture
def pushed_wake_ups_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """RedisStore's waits re-read the store every few seconds even without a
    wake-up; push that past every test's deadline, so a wake-up test passes
    only through the pushed notification it is about (and needs no timing
    bound that a loaded machine could break)."""
    monkeypatch.setattr(redis_engine, "SAFETY_RECHECK", 600.0)


# -- helpers shared by the contract tests ------------------------------------

TENANT = "acme"
MODEL = "llm-small"


def spec(model: str = MODEL, payload: bytes = b"input", **fields: Any) -> JobSpec:
    return JobSpec(model=model, payload=payload, **fields)


async def submit_one(
    store: Store,
    *,
    tenant: str = TENANT,
    priority: Priority = Priority.BATCH,
    key: str = "",
    **fields: Any,
) -> Job:
    request = SubmitRequest(
        tenant=tenant, work=spec(**fields), priority=priority, idempotency_key=key
    )
    return (await store.submit(request)).job


async def submit_group(
    store: Store,
    size: int,
    *,
    max_parallel: int = 0,
    tenant: str = TENANT,
    key: str = "",
    priority: Priority = Priority.BATCH,
    **fields: Any,
) -> Job:
    children = tuple(spec(payload=f"child {i}".encode(), **fields) for i in range(size))
    request = SubmitRequest(
        tenant=tenant,
        work=GroupSpec(children=children, max_parallel=max_parallel),
        priority=priority,
        idempotency_key=key,
    )
    return (await store.submit(request)).job


async def claim_one(
    store: Store, models: Sequence[str] = (MODEL,), worker: str = "w1"
) -> ClaimedJob:
    claimed = await store.claim(worker, models)
    assert len(claimed) == 1, claimed
    return claimed[0]


async def complete(store: Store, claimed: ClaimedJob, result: bytes = b"done") -> Job:
    return await store.set_result(claimed.job.id, claimed.lease_id, JobStatus.COMPLETED, result)


async def status_of(store: Store, job_id: str, tenant: str = TENANT) -> JobStatus:
    return (await store.get(tenant, job_id)).status


def partitions_of(store: Store) -> int:
    """How many partitions (each with its own audit stream) the store spreads over."""
    return len(getattr(getattr(store, "engine", None), "parts", ())) or 1


class _CountsWaitingClaims(Protocol):
    def waiting_claims(self, model: str) -> int: ...


async def claim_is_waiting(store: Store, model: str = MODEL) -> None:
    """Return once a claim on `store` for `model` found nothing and blocks waiting."""
    counter = cast(_CountsWaitingClaims, store)

    async def waiting() -> bool:
        return counter.waiting_claims(model) > 0

    await assert_eventually(waiting, message="no claim is waiting")
