"""Fixtures: a scripted fake JobService on a free loopback port, and a client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobgate import JobClient, RetryPolicy
from tests.client.fake_job_service import FakeJobService, start


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeJobService, str]]:
    service = FakeJobService()
    server, target = await start(service)
    yield service, target
    await server.stop(grace=None)


@pytest.fixture
async def client(fake: tuple[FakeJobService, str]) -> AsyncIterator[JobClient]:
    # Fast back-off so retry tests stay quick; delays the server asks for still apply.
    policy = RetryPolicy(max_attempts=4, initial_backoff=0.02, max_backoff=0.1)
    async with JobClient(fake[1], retry=policy, timeout=5.0) as job_client:
        yield job_client
