"""Fixtures for the in-process server tests (LocalStore unless a test says otherwise)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.servers.harness import Harness, start_harness

MakeHarness = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_harness() -> AsyncIterator[MakeHarness]:
    started: list[Harness] = []

    async def make(**kwargs: Any) -> Harness:
        harness = await start_harness(**kwargs)
        started.append(harness)
        return harness

    yield make
    for harness in started:
        await harness.close()


@pytest.fixture
async def harness(make_harness: MakeHarness) -> Harness:
    return await make_harness()
