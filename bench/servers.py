"""Start the processes a benchmark measures: redis-server, jobgate servers, worker daemons."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster_servers import ClusterDeployment
from tests.launcher import JobgateServer
from tests.redis_server import RedisServer

# Caps raised so the depth benchmark can queue 1M jobs for one tenant, and more.
COMMON_SETTINGS: Mapping[str, str] = {
    "lease-timeout": "10",
    "log-level": "warning",
    "max-live-per-tenant": "10000000",
    "max-live-total": "10000000",
}


@dataclass(frozen=True)
class Topology:
    name: str
    job_target: str
    worker_target: str
    redis: RedisServer | None
    # Process name -> pid, for the CPU and memory figures read from /proc.
    pids: dict[str, int] = field(default_factory=dict)


def _pid(server: JobgateServer) -> int:
    assert server.process is not None
    return server.process.pid


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
def embedded(settings: Mapping[str, str] = {}) -> Iterator[Topology]:
    """`jobgate serve` on the embedded store: one process, two ports; `settings` are
    more flags (`{"fair-share": "off"}`)."""
    with (
        tempfile.TemporaryDirectory(prefix="jobgate-bench-") as workdir,
        _server("serve", Path(workdir), settings) as serve,
    ):
        yield Topology(
            "embedded", serve.address("job"), serve.address("worker"), None, {"serve": _pid(serve)}
        )


@contextmanager
def on_redis(
    appendfsync: str | None = "everysec", settings: Mapping[str, str] = {}
) -> Iterator[Topology]:
    """`jobgate gateway` + `jobgate worker-server` on a private redis-server.

    With AOF at `appendfsync`, or without persistence when it is None (the
    peers' method for the end-to-end figures); `settings` are more server
    flags (e.g. redis-partitions).
    """
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobgate-bench-")))
        aof = () if appendfsync is None else ("--appendonly", "yes", "--appendfsync", appendfsync)
        redis = RedisServer(workdir, *aof)
        redis.start()
        stack.callback(redis.stop)
        shared = {**settings, "redis-url": redis.url}
        gateway = stack.enter_context(_server("gateway", workdir, shared))
        worker_server = stack.enter_context(_server("worker-server", workdir, shared))
        assert redis.process is not None
        pids = {"gateway": _pid(gateway), "worker-server": _pid(worker_server),
                "redis": redis.process.pid}  # fmt: skip
        name = (
            "redis (no persistence)"
            if appendfsync is None
            else f"redis (appendfsync {appendfsync})"
        )
        yield Topology(name, gateway.target, worker_server.target, redis, pids)


@contextmanager
def on_cluster(masters: int, partitions: int) -> Iterator[tuple[Topology, ClusterDeployment]]:
    """`jobgate gateway` + `jobgate worker-server` on a private Redis Cluster.

    `masters` masters, no replicas, no persistence; the servers spread the
    deployment over `partitions` hash tags (--redis-partitions). The pids
    name each master "master 1".. in port order.
    """
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobgate-bench-")))
        cluster = ClusterDeployment(workdir / "cluster", masters=masters).start()
        stack.callback(cluster.stop)
        shared = {"redis-url": cluster.url, "redis-partitions": str(partitions)}
        gateway = stack.enter_context(_server("gateway", workdir, shared))
        worker_server = stack.enter_context(_server("worker-server", workdir, shared))
        pids = {"gateway": _pid(gateway), "worker-server": _pid(worker_server)}
        for index, node in enumerate(cluster.primaries(), 1):
            assert node.process is not None
            pids[f"master {index}"] = node.process.pid
        name = f"cluster, {masters} masters, {partitions} partitions"
        topology = Topology(name, gateway.target, worker_server.target, None, pids)
        yield topology, cluster


@contextmanager
def worker(
    target: str, model: str, handler: str, concurrency: int, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """A `jobgate worker` daemon process (its readiness is the caller's to prove)."""
    command = [sys.executable, "-m", "jobgate.cli", "worker", "--target", target,
               "--model", model, "--handler", handler, "--concurrency", str(concurrency),
               "--log-level", "warning"]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env}
    )
    try:
        yield process
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 15 s (a drain can take a while)."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def environment_note() -> str:
    return f"python {sys.version.split()[0]}, {os.cpu_count()} cores"
