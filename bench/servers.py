"""Start the processes a benchmark measures: redis-server and jobgate servers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.redis_server import RedisServer, free_port

# Caps raised so the depth benchmark can queue 1M jobs for one tenant, and more.
COMMON_FLAGS = (
    "--lease-timeout", "10", "--log-level", "warning",
    "--max-live-per-tenant", "10000000", "--max-live-total", "10000000",
)  # fmt: skip


@dataclass(frozen=True)
class Topology:
    name: str
    job_target: str
    worker_target: str
    redis: RedisServer | None
    # Process name -> pid, for the CPU and memory figures read from /proc.
    pids: dict[str, int] = field(default_factory=dict)


def _wait_serving(target: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server at {target} did not become SERVING")
            time.sleep(0.05)


@contextmanager
def _process(
    args: Sequence[str], env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "jobgate.cli", *args]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def embedded() -> Iterator[Topology]:
    """`jobgate serve` on the embedded store: one process, two ports."""
    job_port, worker_port = free_port(), free_port()
    job, worker = f"127.0.0.1:{job_port}", f"127.0.0.1:{worker_port}"
    args = ["serve", "--listen", job, "--worker-listen", worker, "--metrics-listen",
            f"127.0.0.1:{free_port()}", *COMMON_FLAGS]  # fmt: skip
    with _process(args) as serve:
        _wait_serving(job)
        _wait_serving(worker)
        yield Topology("embedded", job, worker, None, {"serve": serve.pid})


@contextmanager
def on_redis(appendfsync: str | None = "everysec") -> Iterator[Topology]:
    """`jobgate gateway` + `jobgate worker-server` on a private redis-server.

    With AOF at `appendfsync`, or without persistence when it is None (the
    peers' method for the end-to-end figures).
    """
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobgate-bench-")))
        aof = () if appendfsync is None else ("--appendonly", "yes", "--appendfsync", appendfsync)
        redis = RedisServer(workdir, *aof)
        redis.start()
        stack.callback(redis.stop)
        job, worker = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        shared = ["--redis-url", redis.url, *COMMON_FLAGS]
        metrics = ("--metrics-listen", f"127.0.0.1:{free_port()}")
        gateway = stack.enter_context(_process(["gateway", "--listen", job, *metrics, *shared]))
        metrics = ("--metrics-listen", f"127.0.0.1:{free_port()}")
        worker_server = stack.enter_context(
            _process(["worker-server", "--listen", worker, *metrics, *shared])
        )
        _wait_serving(job)
        _wait_serving(worker)
        assert redis.process is not None
        pids = {"gateway": gateway.pid, "worker-server": worker_server.pid,
                "redis": redis.process.pid}  # fmt: skip
        name = (
            "redis (no persistence)"
            if appendfsync is None
            else f"redis (appendfsync {appendfsync})"
        )
        yield Topology(name, job, worker, redis, pids)


@contextmanager
def worker(
    target: str, model: str, handler: str, concurrency: int, env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """A `jobgate worker` daemon process (its readiness is the caller's to prove)."""
    args = ["worker", "--target", target, "--model", model, "--handler", handler,
            "--concurrency", str(concurrency), "--log-level", "warning"]  # fmt: skip
    with _process(args, {**os.environ, **env}) as process:
        yield process


def environment_note() -> str:
    return f"python {sys.version.split()[0]}, {os.cpu_count()} cores"
