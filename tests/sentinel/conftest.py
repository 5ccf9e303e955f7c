"""Sentinel fixtures: a primary, a replica and three sentinels of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sentinel_servers import SentinelDeployment


@pytest.fixture(scope="module")
def shared_sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelDeployment]:
    """One deployment for the tests that never kill anything (starting one costs seconds)."""
    deployment = SentinelDeployment(tmp_path_factory.mktemp("sentinels")).start()
    yield deployment
    deployment.stop()


@pytest.fixture
def own_sentinels(tmp_path: Path) -> Iterator[SentinelDeployment]:
    """A deployment this test may fail over."""
    deployment = SentinelDeployment(tmp_path / "sentinels").start()
    yield deployment
    deployment.stop()
