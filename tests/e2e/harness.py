"""Black-box harness: jobgate server processes on loopback.

Servers run as subprocesses of `python -m jobgate.cli`, exactly as an
operator would start them, configured only through DESIGN.md's flags. A
deployment is ready when every process's gRPC health service answers
SERVING; it is stopped with SIGTERM, then SIGKILL after a deadline.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.redis_server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
LOG_TAIL_CHARS = 6000

# Short timings so recovery-driven behaviour shows within seconds. The lease
# is long enough that a test which claims and answers at once never loses it
# on a busy 2-core machine, and short enough that expiry tests stay quick.
FAST_SETTINGS: Mapping[str, str] = {
    "lease-timeout": "2",
    "retry-backoff": "0.1",
    "grace-period": "2",
    "metrics-listen": "127.0.0.1:0",
}


@dataclass
class ServerProcess:
    """One `jobgate <command>` subprocess with its log file."""

    name: str
    argv: list[str]
    log_path: Path
    health_target: str
    env: Mapping[str, str] = field(default_factory=dict)
    credentials: grpc.ChannelCredentials | None = None
    process: subprocess.Popen[bytes] | None = None
    _log_file: IO[bytes] | None = None

    def start(self) -> None:
        self._log_file = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**server_environment(), **self.env},
            cwd=REPO_ROOT,
        )

    @property
    def exited(self) -> bool:
        return self.process is None or self.process.poll() is not None

    def wait_serving(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.exited:
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            status = health_status(self.health_target, credentials=self.credentials)
            if status == health_pb2.HealthCheckResponse.SERVING:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{self.name} not SERVING within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def send_sigterm(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """Wait up to `timeout` for the exit, then SIGKILL. Returns the exit code."""
        if self.process is None:
            return None
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)
        self._close_log()
        return self.process.returncode

    def terminate(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        self.send_sigterm()
        return self.wait_exit(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return text[-chars:]


def server_environment() -> dict[str, str]:
    """The test's environment minus any JOBGATE_* setting that could leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def health_status(
    target: str,
    service: str = "",
    timeout: float = 1.0,
    credentials: grpc.ChannelCredentials | None = None,
) -> int | None:
    """The health service's answer for `service`, or None when it does not answer."""
    channel = (
        grpc.insecure_channel(target)
        if credentials is None
        else grpc.secure_channel(target, credentials)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError:
            return None
        status: int = response.status
        return status


def flag_list(settings: Mapping[str, str]) -> list[str]:
    return [item for name, value in settings.items() for item in (f"--{name}", value)]


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def listen_port() -> int:
    """A free port below the ephemeral range, so no outgoing connection can take it
    between this check and the server's bind (free_port's race)."""
    low, _ = ephemeral_range()
    for _ in range(100):
        port = random.randrange(20000, max(20001, low))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def loopback() -> str:
    return f"127.0.0.1:{listen_port()}"


@dataclass
class Deployment:
    """A running set of servers: one `serve`, or gateways plus worker-servers on Redis."""

    topology: str
    job_targets: list[str]
    worker_targets: list[str]
    processes: list[ServerProcess]
    workdir: Path
    settings: dict[str, str] = field(default_factory=dict)
    auth: AuthFile | None = None

    @property
    def job_target(self) -> str:
        return self.job_targets[0]

    @property
    def worker_target(self) -> str:
        return self.worker_targets[0]

    def start(self) -> None:
        # Start every process first so their start-ups overlap, then wait.
        for process in self.processes:
            if process.exited:
                process.start()
        for process in self.processes:
            process.wait_serving()

    def stop(self) -> None:
        for process in self.processes:
            process.send_sigterm()
        for process in self.processes:
            process.wait_exit()

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} =====\n{p.log_tail()}" for p in self.processes)


def command(name: str, settings: Mapping[str, str]) -> list[str]:
    return [sys.executable, "-m", "jobgate.cli", name, *flag_list(settings)]


def embedded_deployment(
    workdir: Path, settings: Mapping[str, str], env: Mapping[str, str] = {}
) -> Deployment:
    """`jobgate serve` on the embedded store: both services in one process."""
    workdir.mkdir(parents=True, exist_ok=True)
    job_target, worker_target = loopback(), loopback()
    full = {**settings, "listen": job_target, "worker-listen": worker_target}
    process = ServerProcess(
        "serve", command("serve", full), workdir / "serve.log", health_target=job_target, env=env
    )
    return Deployment("embedded", [job_target], [worker_target], [process], workdir, full)


def redis_deployment(
    workdir: Path,
    redis_url: str,
    partition: str,
    settings: Mapping[str, str],
    gateways: int = 1,
    worker_servers: int = 1,
) -> Deployment:
    """`jobgate gateway` and `jobgate worker-server` replicas sharing one Redis partition."""
    workdir.mkdir(parents=True, exist_ok=True)
    shared = {**settings, "redis-url": redis_url, "redis-partition": partition}
    processes: list[ServerProcess] = []
    job_targets: list[str] = []
    worker_targets: list[str] = []
    for kind, count, targets in (
        ("gateway", gateways, job_targets),
        ("worker-server", worker_servers, worker_targets),
    ):
        for index in range(count):
            target = loopback()
            targets.append(target)
            name = f"{kind}-{index}"
            processes.append(
                ServerProcess(
                    name,
                    command(kind, {**shared, "listen": target}),
                    workdir / f"{name}.log",
                    health_target=target,
                )
            )
    return Deployment("redis", job_targets, worker_targets, processes, workdir, shared)


def start_with_retry(build: Callable[[], Deployment], attempts: int = 3) -> Deployment:
    """Build and start a deployment; on a port taken meanwhile, retry with new ports."""
    for attempt in range(attempts):
        deployment = build()
        try:
            deployment.start()
            return deployment
        except BaseException:
            deployment.stop()
            if attempt + 1 == attempts or "address already in use" not in deployment.logs().lower():
                raise
    raise AssertionError("unreachable")


def restart_process(process: ServerProcess) -> None:
    """Start a stopped server again with the same command line (same port and partition)."""
    process.start()
    process.wait_serving()


@dataclass(frozen=True)
class Token:
    secret: str
    tenant: str
    role: str

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.secret}"),)


@dataclass(frozen=True)
class AuthFile:
    path: Path
    tokens: Sequence[Token]

    def client(self, tenant: str) -> Token:
        return next(t for t in self.tokens if t.role == "client" and t.tenant == tenant)

    def worker(self) -> Token:
        return next(t for t in self.tokens if t.role == "worker")


def write_auth_file(path: Path, tokens: Sequence[Token]) -> AuthFile:
    """DESIGN's --auth-file: tokens stored only as SHA-256 hex."""
    entries = [
        {
            "sha256": hashlib.sha256(t.secret.encode()).hexdigest(),
            "tenant": t.tenant,
            "role": t.role,
        }
        for t in tokens
    ]
    path.write_text(json.dumps({"tokens": entries}))
    return AuthFile(path, tokens)


def attach_server_logs(item: pytest.Item, report: pytest.TestReport) -> None:
    """For a failed test, add the logs of every deployment it used to its report."""
    if not report.failed:
        return
    for name, value in getattr(item, "funcargs", {}).items():
        if isinstance(value, Deployment):
            report.sections.append((f"server logs: {name} ({value.topology})", value.logs()))


def run_to_exit(
    name: str, settings: Mapping[str, str], timeout: float = 20.0, env: Mapping[str, str] = {}
) -> tuple[int, str]:
    """Run a server command expected to refuse to start; return its exit code and output."""
    completed = subprocess.run(
        command(name, settings),
        capture_output=True,
        env={**server_environment(), **env},
        cwd=REPO_ROOT,
        timeout=timeout,
        check=False,
    )
    output = (completed.stdout + completed.stderr).decode(errors="replace")
    return completed.returncode, output
