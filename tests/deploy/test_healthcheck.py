"""deploy/healthcheck.py, the image's HEALTHCHECK, against real servers: healthy
while SERVING, unhealthy when the server cannot reach Redis or is not there."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.servers import JobgateProcess
from tests.deploy.tools import DEPLOY
from tests.helpers import wait_until
from tests.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis

HEALTHCHECK = DEPLOY / "healthcheck.py"


def run_healthcheck(*args: str, env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    return done.returncode


@pytest.fixture
def gateway(own_redis: RedisServer, partition: str, tmp_path: Path) -> Iterator[JobgateProcess]:
    server = JobgateProcess(
        "gateway", tmp_path, "--redis-url", own_redis.url, "--redis-partition", partition
    )
    try:
        server.wait_serving()
        yield server
    finally:
        server.stop()


def test_healthy_while_the_server_serves(gateway: JobgateProcess) -> None:
    assert run_healthcheck(gateway.target) == 0


def test_reads_the_listen_address_the_image_sets(gateway: JobgateProcess) -> None:
    listen = f"0.0.0.0:{gateway.port}"  # as the image sets JOBGATE_LISTEN
    assert run_healthcheck(env={"JOBGATE_LISTEN": listen}) == 0


def test_unhealthy_while_the_server_cannot_reach_redis(
    gateway: JobgateProcess, own_redis: RedisServer
) -> None:
    own_redis.kill()
    wait_until(lambda: run_healthcheck(gateway.target) == 1, 10, "healthcheck never failed")


def test_unhealthy_when_nothing_answers() -> None:
    assert run_healthcheck(f"127.0.0.1:{free_port()}") == 1
