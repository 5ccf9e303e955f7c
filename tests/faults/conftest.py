"""Fault-suite fixtures: the scale (short or `--soak`), the rig, the figures, and
deployments of a test's own.

Two kinds of fault test share this directory. Scenarios (`mark.scenario`)
drive a rig (tests/faults/rig.py: servers, worker daemons, a recording client,
a steady load) through faults and account for every job in a ledger.
Single-fault tests use a deployment of their own (`on_own_redis`,
`on_shared_redis`, `embedded_alone`, from tests/e2e/harness.py) that they
stop, restart or cut off, and call the API directly (`own_api`,
`shared_api`, `embedded_api`). A failed test's report carries the logs of
every rig and deployment it used.

Short mode (the default, run by `make check`) keeps job counts small so the
whole directory stays within a few minutes on a 2-core machine. `--soak`
(or JOBGATE_SOAK=1) multiplies job counts and fault repetitions. Each
scenario records its figures (jobs, faults injected, lost, doubled, recovery
p99); they are printed at the end of the run and, with `--faults-figures
PATH`, written as JSON for docs/reliability.md (tests/faults/report.py).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.api import Api, fresh_name, tenant_metadata
from tests.e2e.harness import (
    FAST_SETTINGS,
    Deployment,
    attach_server_logs,
    embedded_deployment,
    redis_deployment,
)
from tests.faults.rig import FAULT_SETTINGS, Figures, Rig
from tests.redis_server import RedisServer
from tests.rig_fixtures import attach_rig_logs, close_rigs, tracked_rigs

SHORT_TIMEOUT = 120
SOAK_TIMEOUT = 3600
FIGURES: dict[str, Figures] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faults")
    group.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="fault suite: long runs (more jobs, more faults); also JOBGATE_SOAK=1",
    )
    group.addoption(
        "--faults-figures",
        default=os.environ.get("JOBGATE_FAULTS_FIGURES", ""),
        metavar="PATH",
        help="fault suite: write each scenario's figures to PATH as JSON",
    )


def soak_enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--soak")) or os.environ.get("JOBGATE_SOAK") == "1"


@dataclass(frozen=True)
class Scale:
    """Job counts and repetitions for the chosen mode."""

    soak: bool

    def __call__(self, short: int, soak: int) -> int:
        return soak if self.soak else short

    @property
    def mode(self) -> str:
        return "soak" if self.soak else "short"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scenarios get a deadline fitting the mode (the project default is 60 s)."""
    limit = SOAK_TIMEOUT if soak_enabled(config) else SHORT_TIMEOUT
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here and item.get_closest_marker("scenario"):
            item.add_marker(pytest.mark.timeout(limit))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scenario: a fault scenario (deadline set by the mode)")


@pytest.fixture(scope="session")
def scale(pytestconfig: pytest.Config) -> Scale:
    return Scale(soak_enabled(pytestconfig))


RedisFactory = Callable[..., RedisServer]
RigFactory = Callable[..., Rig]


@pytest.fixture
def make_redis(tmp_path: Path) -> Iterator[RedisFactory]:
    """Start redis-servers of this test's own (extra args: persistence, maxmemory...)."""
    started: list[RedisServer] = []

    def make(*args: str, name: str = "redis") -> RedisServer:
        server = RedisServer(tmp_path / name, *args)
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.kill()


@pytest.fixture
async def make_rig(
    tmp_path: Path, make_redis: RedisFactory, request: pytest.FixtureRequest
) -> AsyncIterator[RigFactory]:
    """Build rigs; each is closed (workers, then servers) after the test, its logs
    attached to a failed test's report."""
    rigs = tracked_rigs(request)

    def make(
        redis_server: RedisServer | None = None, settings: dict[str, str] | None = None, **kw: Any
    ) -> Rig:
        server = redis_server or make_redis("--appendonly", "yes", "--appendfsync", "always")
        rig = Rig(
            tmp_path / f"rig{len(rigs)}", server, {**FAULT_SETTINGS, **(settings or {})}, **kw
        )
        rigs.append(rig)
        return rig

    yield make
    await close_rigs(rigs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report gets the logs of every rig and deployment it used."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    attach_rig_logs(item, report)
    attach_server_logs(item, report)


@pytest.fixture
def on_own_redis(own_redis: RedisServer, tmp_path: Path) -> Iterator[Deployment]:
    """Gateway + worker-server on this test's own redis-server (AOF on), which it may stop."""
    deployment = redis_deployment(
        tmp_path / "servers", own_redis.url, "fault", FAST_SETTINGS
    ).start()
    yield deployment
    deployment.stop()


@pytest.fixture
def on_shared_redis(redis_server: RedisServer, tmp_path: Path) -> Iterator[Deployment]:
    """Gateway + worker-server of this test's own on the session Redis (fresh partition)."""
    partition = f"f{uuid.uuid4().hex[:10]}"
    deployment = redis_deployment(
        tmp_path / "servers", redis_server.url, partition, FAST_SETTINGS
    ).start()
    yield deployment
    deployment.stop()


@pytest.fixture
def embedded_alone(tmp_path: Path) -> Iterator[Deployment]:
    """`jobgate serve` of this test's own, to signal."""
    deployment = embedded_deployment(tmp_path / "serve", FAST_SETTINGS).start()
    yield deployment
    deployment.stop()


async def open_api(deployment: Deployment) -> tuple[Api, list[grpc.aio.Channel]]:
    job_channel = grpc.aio.insecure_channel(deployment.job_target)
    worker_channel = grpc.aio.insecure_channel(deployment.worker_target)
    api = Api(job_channel, worker_channel, tenant_metadata(fresh_name("t")))
    return api, [job_channel, worker_channel]


@pytest.fixture
async def own_api(on_own_redis: Deployment) -> AsyncIterator[Api]:
    api, channels = await open_api(on_own_redis)
    yield api
    for channel in channels:
        await channel.close(None)


@pytest.fixture
async def shared_api(on_shared_redis: Deployment) -> AsyncIterator[Api]:
    api, channels = await open_api(on_shared_redis)
    yield api
    for channel in channels:
        await channel.close(None)


@pytest.fixture
async def embedded_api(embedded_alone: Deployment) -> AsyncIterator[Api]:
    api, channels = await open_api(embedded_alone)
    yield api
    for channel in channels:
        await channel.close(None)


@pytest.fixture
def figures() -> Callable[[Figures], None]:
    """Record a scenario's figures (printed at the end, written with --faults-figures)."""

    def record(figure: Figures) -> None:
        FIGURES[figure.scenario] = figure

    return record


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if not FIGURES:
        return
    mode = "soak" if soak_enabled(config) else "short"
    terminalreporter.write_sep("-", f"fault scenarios ({mode} mode)")
    for figure in FIGURES.values():
        terminalreporter.write_line(
            f"{figure.scenario}: jobs={figure.jobs} faults={figure.faults} lost={figure.lost} "
            f"doubled={figure.doubled} recovery_p99={figure.recovery_p99:.2f}s {figure.notes}"
        )
    path = config.getoption("--faults-figures")
    if path:
        document = {"mode": mode, "scenarios": [asdict(f) for f in FIGURES.values()]}
        Path(path).write_text(json.dumps(document, indent=2) + "\n")
