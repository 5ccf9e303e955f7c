"""The audit trail of a data directory, read-only while its store runs (`jobgate events`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from store.journal import DataDirRefused, EventReader
from store.memory.durable import event_reader
from store.model import JobStatus
from tests.helpers import assert_eventually
from tests.store.conftest import TENANT, submit_one
from tests.store.durable import open_store


@pytest.fixture
async def reader(tmp_path: Path) -> AsyncIterator[EventReader]:
    await (await open_store(tmp_path)).close()  # the file exists
    opened = event_reader(tmp_path)
    await opened.open()
    yield opened
    await opened.close()


async def test_it_reads_the_events_a_running_store_committed(
    tmp_path: Path, reader: EventReader
) -> None:
    store = await open_store(tmp_path)
    try:
        job = await submit_one(store)
        await store.cancel(TENANT, job.id)
        expected = [
            (job.id, None, JobStatus.QUEUED),
            (job.id, JobStatus.QUEUED, JobStatus.CANCELLED),
        ]

        async def read() -> bool:  # under normal, the log's batches reach SQLite within 50 ms
            events = await reader.events()
            return [(e.job_id, e.from_status, e.to_status) for e in events] == expected

        await assert_eventually(read, message="the reader never saw the store's events")
    finally:
        await store.close()


async def test_it_pages_by_position(tmp_path: Path, reader: EventReader) -> None:
    store = await open_store(tmp_path)
    try:
        for _ in range(5):
            await submit_one(store)
    finally:
        await store.close()

    first = await reader.events(count=2)
    rest = await reader.events(after=first[-1].id, count=10)

    assert [e.id for e in first + rest] == ["1", "2", "3", "4", "5"]


async def test_a_blocking_read_returns_an_event_committed_while_it_waits(
    tmp_path: Path, reader: EventReader
) -> None:
    store = await open_store(tmp_path)
    try:
        waiting = asyncio.create_task(reader.events(block=timedelta(seconds=30)))
        job = await submit_one(store)

        events = await waiting
    finally:
        await store.close()

    assert [e.job_id for e in events] == [job.id]


async def test_a_directory_without_data_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataDirRefused, match="holds no jobgate data"):
        await event_reader(tmp_path).open()
