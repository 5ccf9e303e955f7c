"""A real redis-server accepts deploy/redis.conf and deploy/sentinel/sentinel.conf."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.tools import DEPLOY, require_tool, run_tool
from tests.helpers import wait_until
from tests.redis_server import free_port, require_redis_server

pytestmark = pytest.mark.redis

REDIS_CONF = DEPLOY / "redis.conf"
SENTINEL_CONF = DEPLOY / "sentinel" / "sentinel.conf"


class ConfiguredRedis:
    """redis-server started from a config file; loopback, a free port and a temp dir."""

    def __init__(self, config: Path, workdir: Path, *extra: str) -> None:
        self.port = free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [require_redis_server(), str(config), "--port", str(self.port),
             "--bind", "127.0.0.1", "--dir", str(workdir),
             "--logfile", str(workdir / "redis.log"), *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        wait_until(
            self._ready, timeout=10, message=f"redis-server from {config.name} did not start"
        )

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            stderr = self.process.stderr.read() if self.process.stderr else ""
            log = self.workdir / "redis.log"
            raise AssertionError(
                f"redis-server exited: {stderr}{log.read_text() if log.exists() else ''}"
            )
        done = subprocess.run(
            [redis_cli(), "-p", str(self.port), "PING"], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() == "PONG"

    def cli(self, *args: str) -> str:
        return run_tool(redis_cli(), "-p", str(self.port), *args).strip()

    def config(self, name: str) -> str:
        return self.cli("CONFIG", "GET", name).splitlines()[1]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        if self.process.stderr:
            self.process.stderr.close()


def redis_cli() -> str:
    return require_tool("redis-cli", "apt-get install redis-server (redis-tools)")


@pytest.fixture
def production_redis(tmp_path: Path) -> Iterator[ConfiguredRedis]:
    server = ConfiguredRedis(REDIS_CONF, tmp_path / "primary")
    yield server
    server.stop()


def test_production_config_keeps_an_aof_fsynced_every_second(
    production_redis: ConfiguredRedis,
) -> None:
    assert production_redis.config("appendonly") == "yes"
    assert production_redis.config("appendfsync") == "everysec"
    assert production_redis.config("no-appendfsync-on-rewrite") == "no"
    production_redis.cli("SET", "probe", "1")
    assert list((production_redis.workdir / "appendonlydir").glob("*.aof"))


def test_production_config_never_evicts(production_redis: ConfiguredRedis) -> None:
    assert production_redis.config("maxmemory-policy") == "noeviction"
    assert int(production_redis.config("maxmemory")) > 0


def test_production_config_keeps_idle_connections(production_redis: ConfiguredRedis) -> None:
    # Blocking readers (claim wake-ups, XREAD BLOCK) sit idle for long periods.
    assert production_redis.config("timeout") == "0"
    assert int(production_redis.config("tcp-keepalive")) > 0


def test_sentinel_config_monitors_the_primary(
    production_redis: ConfiguredRedis, tmp_path: Path
) -> None:
    # Sentinel rewrites its config, so it gets a copy pointed at our primary.
    config = tmp_path / "sentinel.conf"
    text, count = re.subn(
        r"^sentinel monitor jobgate \S+ \d+ (\d+)$",
        rf"sentinel monitor jobgate 127.0.0.1 {production_redis.port} \1",
        SENTINEL_CONF.read_text(),
        flags=re.MULTILINE,
    )
    assert count == 1
    config.write_text(text)
    sentinel = ConfiguredRedis(config, tmp_path / "sentinel", "--sentinel")
    try:
        primary = sentinel.cli("SENTINEL", "get-master-addr-by-name", "jobgate").splitlines()
        assert primary == ["127.0.0.1", str(production_redis.port)]
        fields = sentinel.cli("SENTINEL", "master", "jobgate").splitlines()
        settings = dict(zip(fields[::2], fields[1::2], strict=True))
        assert settings["down-after-milliseconds"] == "5000"
        assert settings["quorum"] == "2"
    finally:
        sentinel.stop()
