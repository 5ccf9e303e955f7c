"""Shared fixtures: a private redis-server, a fresh partition, and the TLS certificates."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pki import Pki, make_pki
from tests.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session; tests isolate by partition, never FLUSHDB."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (with AOF on), to stop, kill or restart."""
    server = RedisServer(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def partition() -> str:
    """A fresh key partition (hash tag) for one test."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The session's CA and certificates, issued once for every TLS test."""
    return make_pki(tmp_path_factory.mktemp("pki"))
