"""A private Sentinel deployment per test: one primary, one replica, three sentinels.

Every process runs from its own temp dir on a free port (tests/redis_server.py),
so a test may kill the primary and watch the sentinels fail over. Sentinels
run as `redis-server <conf> --sentinel` (what `redis-sentinel` is a link to),
with a short `down-after-milliseconds` so a failover completes in seconds.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.redis_server import RedisServer, free_port, require_redis_server

MASTER_NAME = "jobgate"
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
READY_TIMEOUT = 30.0
# Redis waits 5 s by default before a diskless full sync, for more replicas
# to join it; here the one replica is all there is.
SYNC_AT_ONCE = ("--repl-diskless-sync-delay", "0")


def require_sentinel() -> list[str]:
    """The command that runs a sentinel; skip without one, fail under JOBGATE_REQUIRE_REDIS=1."""
    sentinel = shutil.which("redis-sentinel")
    if sentinel is not None:
        return [sentinel]
    server = require_redis_server()
    probe = subprocess.run([server, "--version"], capture_output=True, check=False, timeout=10)
    if probe.returncode != 0:  # pragma: no cover - a redis-server that cannot say its version
        message = "redis-server --version failed: cannot run a sentinel"
        if os.environ.get("JOBGATE_REQUIRE_REDIS") == "1":
            pytest.fail(message + " (JOBGATE_REQUIRE_REDIS=1)")
        pytest.skip(message)
    return [server]


class SentinelProcess:
    """One sentinel monitoring MASTER_NAME; it rewrites its own config at run time."""

    def __init__(self, command: list[str], workdir: Path, primary_port: int) -> None:
        self.command = command
        self.workdir = workdir
        self.port = free_port()
        self.primary_port = primary_port
        self.run_id = secrets.token_hex(20)
        self.password: str | None = None  # the Redis servers' (sentinel auth-pass)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, peers: list[SentinelProcess], replica_port: int, timeout: float = 10.0) -> None:
        """Start knowing its peers and the replica already, as a sentinel restarted from
        its rewritten config would: discovering them (hello messages every 2 s) would
        cost seconds per deployment."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "sentinel.conf"
        config.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    "bind 127.0.0.1",
                    "protected-mode no",
                    f"dir {self.workdir}",
                    f"logfile {self.workdir / 'sentinel.log'}",
                    f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.primary_port} {QUORUM}",
                    f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {MASTER_NAME} 1",
                    f"sentinel myid {self.run_id}",
                    *(
                        [f"sentinel auth-pass {MASTER_NAME} {self.password}"]
                        if self.password
                        else []
                    ),
                    f"sentinel known-replica {MASTER_NAME} 127.0.0.1 {replica_port}",
                    *(
                        f"sentinel known-sentinel {MASTER_NAME} 127.0.0.1 {peer.port} {peer.run_id}"
                        for peer in peers
                        if peer is not self
                    ),
                    "",
                ]
            )
        )
        self.process = subprocess.Popen(
            [*self.command, str(config), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"sentinel exited at start:\n{self.log()}")
            if time.monotonic() >= deadline:
                raise RuntimeError(f"sentinel on port {self.port} did not start:\n{self.log()}")
            time.sleep(0.05)

    def _auth_lines(self) -> list[str]:
        return [f"sentinel auth-pass {MASTER_NAME} {self.password}"] if self.password else []

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, decode_responses=True)

    def master_state(self) -> dict[str, Any]:
        with self.client() as client:
            state: dict[str, Any] = client.sentinel_master(MASTER_NAME)
            return state

    def primary_port_now(self) -> int | None:
        with self.client() as client:
            address = client.sentinel_get_master_addr_by_name(MASTER_NAME)
        return None if address is None else int(address[1])

    def _answers(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def log(self) -> str:
        try:
            return (self.workdir / "sentinel.log").read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return "(no log)"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class SentinelDeployment:
    """Primary + replica + three sentinels; `url` is the redis+sentinel:// URL for jobgate."""

    def __init__(
        self,
        workdir: Path,
        primary_args: tuple[str, ...] = (),
        primary_only_args: tuple[str, ...] = (),
        password: str | None = None,
    ) -> None:
        """`primary_args` go to both servers, `primary_only_args` to the first primary alone
        (e.g. min-replicas-to-write 1, which would stop a promoted primary with no
        replica left from taking writes)."""
        self.sentinel_command = require_sentinel()
        self.workdir = workdir
        self.password = password
        self.primary_args = (*SYNC_AT_ONCE, *primary_args)
        self.primary = RedisServer(workdir / "primary", *self.primary_args, *primary_only_args)
        self.replica: RedisServer | None = None
        self.sentinels: list[SentinelProcess] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        credentials = f":{self.password}@" if self.password else ""
        return f"redis+sentinel://{credentials}{hosts}/{MASTER_NAME}/0"

    @property
    def servers(self) -> list[RedisServer]:
        return [self.primary] + ([self.replica] if self.replica is not None else [])

    def start(self) -> SentinelDeployment:
        self.primary.start()
        # The replica takes the primary's settings too (min-replicas-to-write
        # matters once it is promoted).
        self.replica = RedisServer(
            self.workdir / "replica",
            *self.primary_args,
            "--replicaof",
            "127.0.0.1",
            str(self.primary.port),
        )
        self.replica.start()
        self._wait(self._replica_in_sync, "the replica to sync")
        if self.password is not None:
            # Set once in sync: RedisServer's start and INFO checks speak no AUTH.
            self.replica.command("CONFIG", "SET", "masterauth", self.password)
            for server in self.servers:
                server.command("CONFIG", "SET", "requirepass", self.password)
        self.sentinels = [
            SentinelProcess(
                self.sentinel_command, self.workdir / f"sentinel{index}", self.primary.port
            )
            for index in range(3)
        ]
        for sentinel in self.sentinels:
            sentinel.password = self.password
            sentinel.start(self.sentinels, self.replica.port)
        self._wait(self._sentinels_agree, "the sentinels to find each other and the replica")
        return self

    def _replica_in_sync(self) -> bool:
        assert self.replica is not None
        return self.replica.info_field("replication", "master_link_status") == "up"

    def _sentinels_agree(self) -> bool:
        for sentinel in self.sentinels:
            state = sentinel.master_state()
            if int(state["num-other-sentinels"]) < 2 or int(state["num-slaves"]) < 1:
                return False
        return True

    def current_primary_port(self) -> int | None:
        """The primary's port according to the first sentinel that answers."""
        for sentinel in self.sentinels:
            try:
                return sentinel.primary_port_now()
            except redis.RedisError:
                continue
        return None

    def wait_failover(self, old_port: int, timeout: float = READY_TIMEOUT) -> int:
        """The new primary's port once every sentinel names one other than `old_port`."""

        def moved() -> bool:
            return all(
                sentinel.primary_port_now() not in (None, old_port) for sentinel in self.sentinels
            )

        self._wait(moved, "the sentinels to fail over", timeout)
        port = self.current_primary_port()
        assert port is not None
        return port

    def _wait(self, check: Any, what: str, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() >= deadline:
                logs = "\n".join(sentinel.log() for sentinel in self.sentinels[:1])
                raise RuntimeError(f"timed out waiting for {what}:\n{logs}")
            time.sleep(0.05)

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()
