"""A `jobgate serve` with one worker daemon, and a helper that runs `jobgate` commands;
or the fake JobService of tests/client, for the commands whose RPCs it stands in for."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli.fake_cli import FakeCli
from tests.client.fake_job_service import FakeJobService, start
from tests.e2e.harness import Deployment, embedded_deployment, server_environment

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Models the test worker serves; any other model's jobs stay queued.
SERVED = ("cli-echo", "cli-fail", "cli-staged", "cli-gate")


@dataclass
class Cli:
    """Runs `jobgate ...` as a user would, against the test server."""

    target: str

    def env(self) -> dict[str, str]:
        return {**server_environment(), "JOBGATE_TARGET": self.target}

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "jobgate.cli", *args]

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=REPO_ROOT,
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(),
            cwd=REPO_ROOT,
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("cli")
    settings = {"lease-timeout": "5", "retry-backoff": "0.1", "metrics-listen": "off"}
    deployment = embedded_deployment(workdir, settings)
    deployment.start()
    models = [item for model in SERVED for item in ("--model", model)]
    log = (workdir / "worker.log").open("wb")
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "jobgate.cli", "worker",
            "--target", deployment.worker_target, *models,
            "--handler", "tests.cli.handlers:dispatch", "--concurrency", "4",
            "--claim-wait", "2",
        ],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=server_environment(),
    )  # fmt: skip
    try:
        yield deployment
    finally:
        worker.terminate()
        worker.wait(15)
        log.close()
        deployment.stop()


@pytest.fixture
def cli(server: Deployment) -> Cli:
    return Cli(server.job_target)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeJobService, str]]:
    """The in-memory JobService of tests/client, on a free loopback port, and its address."""
    service = FakeJobService()
    fake_server, target = await start(service)
    yield service, target
    await fake_server.stop(grace=None)


@pytest.fixture
def service(fake: tuple[FakeJobService, str]) -> FakeJobService:
    return fake[0]


@pytest.fixture
def fake_cli(fake: tuple[FakeJobService, str], capsys: pytest.CaptureFixture[str]) -> FakeCli:
    return FakeCli(fake[1], capsys)
