"""Start the processes a benchmark measures: redis-server and jobgate servers."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.launcher import JobgateServer
from tests.redis_server import RedisServer

# Caps raised so the depth benchmark can queue 100k jobs for one tenant.
COMMON_SETTINGS: Mapping[str, str] = {
    "lease-timeout": "10",
    "log-level": "warning",
    "max-live-per-tenant": "1000000",
    "max-live-total": "1000000",
}


@dataclass(frozen=True)
class Topology:
    name: str
    job_target: str
    worker_target: str
    redis: RedisServer | None


@contextmanager
def _server(
    command: str, workdir: Path, settings: Mapping[str, str] = {}
) -> Iterator[JobgateServer]:
    """One server by the shared launcher (port 0, bound ports read back), SERVING."""
    server = JobgateServer(command, workdir / f"{command}.log", {**COMMON_SETTINGS, **settings})
    server.start()
    try:
        server.wait_serving(timeout=20.0)
        yield server
    finally:
        server.terminate(timeout=15)


@contextmanager
def embedded() -> Iterator[Topology]:
    """`jobgate serve` on the embedded store: one process, two ports."""
    with (
        tempfile.TemporaryDirectory(prefix="jobgate-bench-") as workdir,
        _server("serve", Path(workdir)) as serve,
    ):
        yield Topology("embedded", serve.address("job"), serve.address("worker"), None)


@contextmanager
def on_redis(appendfsync: str = "everysec") -> Iterator[Topology]:
    """`jobgate gateway` + `jobgate worker-server` on a private redis-server with AOF."""
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobgate-bench-")))
        redis = RedisServer(workdir, "--appendonly", "yes", "--appendfsync", appendfsync)
        redis.start()
        stack.callback(redis.stop)
        shared = {"redis-url": redis.url}
        gateway = stack.enter_context(_server("gateway", workdir, shared))
        worker_server = stack.enter_context(_server("worker-server", workdir, shared))
        yield Topology(
            f"redis (appendfsync {appendfsync})", gateway.target, worker_server.target, redis
        )


def environment_note() -> str:
    return f"python {sys.version.split()[0]}, {os.cpu_count()} cores"
