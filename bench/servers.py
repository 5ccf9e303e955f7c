"""Start the processes a benchmark measures: redis-server and jobgate servers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.redis_server import RedisServer, free_port

# Caps raised so the depth benchmark can queue 100k jobs for one tenant.
COMMON_FLAGS = (
    "--lease-timeout", "10", "--log-level", "warning",
    "--max-live-per-tenant", "1000000", "--max-live-total", "1000000",
)  # fmt: skip


@dataclass(frozen=True)
class Topology:
    name: str
    job_target: str
    worker_target: str
    redis: RedisServer | None


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
def _process(args: Sequence[str]) -> Iterator[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "jobgate.cli", *args]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    with _process(args):
        _wait_serving(job)
        _wait_serving(worker)
        yield Topology("embedded", job, worker, None)


@contextmanager
def on_redis(appendfsync: str = "everysec") -> Iterator[Topology]:
    """`jobgate gateway` + `jobgate worker-server` on a private redis-server with AOF."""
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobgate-bench-")))
        redis = RedisServer(workdir, "--appendonly", "yes", "--appendfsync", appendfsync)
        redis.start()
        stack.callback(redis.stop)
        job, worker = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        shared = ["--redis-url", redis.url, *COMMON_FLAGS]
        stack.enter_context(_process(["gateway", "--listen", job, "--metrics-listen",
                                      f"127.0.0.1:{free_port()}", *shared]))  # fmt: skip
        stack.enter_context(_process(["worker-server", "--listen", worker, "--metrics-listen",
                                      f"127.0.0.1:{free_port()}", *shared]))  # fmt: skip
        _wait_serving(job)
        _wait_serving(worker)
        yield Topology(f"redis (appendfsync {appendfsync})", job, worker, redis)


def environment_note() -> str:
    return f"python {sys.version.split()[0]}, {os.cpu_count()} cores"
