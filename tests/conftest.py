"""Shared fixtures: a private redis-server, a fresh partition, the TLS certificates,
and `timings`, where a test hands the durations it measures (tests/timings.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pki import Pki, make_pki
from tests.redis_server import RedisServer
from tests.timings import TIMINGS_ENV, Timing, Timings, summary_lines, write

_RECORDED: list[Timing] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--timings",
        default=os.environ.get(TIMINGS_ENV, ""),
        metavar="PATH",
        help="write the durations tests measured (never asserted) to PATH as JSON",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "timing: measures a duration whose bound the benchmark checks (automatic)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that records timings is marked `timing`: the bench selects them so."""
    for item in items:
        if "timings" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timing)


@pytest.fixture
def timings(request: pytest.FixtureRequest) -> Timings:
    """Record a measured duration for the benchmark's bound (bench/timing.py), never assert it."""
    return Timings(request.node.nodeid, _RECORDED)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if not _RECORDED:
        return
    terminalreporter.write_sep(
        "-", "durations measured (bounds: python -m bench.run --only timing)"
    )
    for line in summary_lines(_RECORDED):
        terminalreporter.write_line(line)
    path = config.getoption("--timings")
    if path:
        write(_RECORDED, Path(path))


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
