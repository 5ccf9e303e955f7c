"""The one launcher for jobgate server processes (e2e, fault, deploy and bench).

A server is started as an operator would start it, `python -m jobgate.cli
<command>`, on port 0 for every listener (`--listen`, `--worker-listen` for
`serve`, `--metrics-listen`). The kernel picks free ports at bind time, so no
port is guessed and no start-up can lose a race for one. The process prints
`jobgate <command> listening job=HOST:PORT worker=HOST:PORT metrics=HOST:PORT`
to stdout once its listeners are bound (serving.runner.Process._announce); the
launcher reads the bound addresses back from that line.

It lives in tests/ because bench/ already imports tests.redis_server: one
module both can import, and bench is the only non-test user.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
LOG_TAIL_CHARS = 6000
ANY_PORT = "127.0.0.1:0"
SERVING = health_pb2.HealthCheckResponse.SERVING

# Anchored at a line start: log lines go to stderr with a timestamp (or as
# JSON), so only the announcement itself can match.
_ANNOUNCEMENT = re.compile(r"^jobgate (?P<command>\S+) listening (?P<parts>.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Announcement:
    """What a server said it bound: listener name ("job", "worker", "metrics") to address."""

    command: str
    addresses: Mapping[str, str]

    @property
    def grpc_targets(self) -> list[str]:
        return [self.addresses[name] for name in ("job", "worker") if name in self.addresses]


def parse_announcement(output: str) -> Announcement | None:
    """The first announcement line in a server's output, or None before it is printed."""
    found = _ANNOUNCEMENT.search(output)
    if found is None:
        return None
    pairs = (part.split("=", 1) for part in found["parts"].split())
    addresses = {name: address for name, address in pairs if address != "off"}
    return Announcement(found["command"], addresses)


def server_environment() -> dict[str, str]:
    """The test's environment minus any JOBGATE_* setting that could leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def flag_list(settings: Mapping[str, str]) -> list[str]:
    return [item for name, value in settings.items() for item in (f"--{name}", value)]


def port_zero_settings(command: str) -> dict[str, str]:
    """Port 0 for every listener `command` has."""
    listeners = {"listen": ANY_PORT, "metrics-listen": ANY_PORT}
    if command == "serve":
        listeners["worker-listen"] = ANY_PORT
    return listeners


def command_line(command: str, settings: Mapping[str, str] = {}) -> list[str]:
    """`python -m jobgate.cli <command>` with port 0 listeners unless `settings` says otherwise."""
    return [
        sys.executable,
        "-m",
        "jobgate.cli",
        command,
        *flag_list({**port_zero_settings(command), **settings}),
    ]


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


class JobgateServer:
    """One `jobgate <command>` subprocess, its output (stdout and stderr) in a log file."""

    def __init__(
        self,
        command: str,
        log_path: Path,
        settings: Mapping[str, str] = {},
        env: Mapping[str, str] = {},
        name: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.command = command
        self.name = name or command
        self.log_path = log_path
        self.settings = dict(settings)
        self.env = dict(env)
        self.credentials = credentials
        self.process: subprocess.Popen[bytes] | None = None
        self.announcement: Announcement | None = None
        self._log_file: IO[bytes] | None = None
        self._log_start = 0

    @property
    def argv(self) -> list[str]:
        return command_line(self.command, self.settings)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log_path.open("ab")
        # A restart appends to the same log: read its announcement after this offset.
        self._log_start = self._log_file.tell()
        self.announcement = None
        self.process = subprocess.Popen(
            self.argv,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**server_environment(), **self.env},
            cwd=REPO_ROOT,
        )

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Start a stopped server again on the addresses it had, so clients keep their targets.

        Those ports were bound by this server a moment ago, not guessed.
        """
        if self.announcement is None:
            raise RuntimeError(f"{self.name} never announced its addresses")
        worker_flag = "worker-listen" if self.command == "serve" else "listen"
        flags = {"job": "listen", "worker": worker_flag, "metrics": "metrics-listen"}
        for listener, address in self.announcement.addresses.items():
            self.settings[flags[listener]] = address
        self.start()
        self.wait_serving(timeout)

    @property
    def exited(self) -> bool:
        return self.process is None or self.process.poll() is not None

    def wait_announced(self, timeout: float = START_TIMEOUT) -> Announcement:
        """The bound addresses, once the server has printed them; fails if it exits first."""
        deadline = time.monotonic() + timeout
        while self.announcement is None:
            self.announcement = parse_announcement(self._output_since_start())
            if self.announcement is not None:
                break
            if self.exited:
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"{self.name} announced no address in {timeout}s:\n{self.log_tail()}"
                )
            time.sleep(0.02)
        return self.announcement

    def wait_serving(self, timeout: float = START_TIMEOUT) -> None:
        """Return once every gRPC listener's health service answers SERVING."""
        deadline = time.monotonic() + timeout
        announcement = self.wait_announced(timeout)
        for target in announcement.grpc_targets:
            while health_status(target, credentials=self.credentials) != SERVING:
                if self.exited:
                    raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"{self.name} not SERVING within {timeout}s:\n{self.log_tail()}"
                    )
                time.sleep(0.05)

    def address(self, listener: str) -> str:
        """The bound HOST:PORT of "job", "worker" or "metrics" (after wait_announced)."""
        if self.announcement is None:
            raise RuntimeError(f"{self.name} has not announced its addresses yet")
        return self.announcement.addresses[listener]

    @property
    def target(self) -> str:
        """The gRPC address: JobService for serve and gateway, WorkerService for worker-server."""
        if self.announcement is None:
            raise RuntimeError(f"{self.name} has not announced its addresses yet")
        return self.announcement.grpc_targets[0]

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
        """SIGTERM (the drain), wait up to `timeout`, then SIGKILL. Returns the exit code."""
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

    def _output_since_start(self) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        return self.output()[-chars:] or "(no log)"


def run_to_exit(
    command: str,
    settings: Mapping[str, str],
    timeout: float = 20.0,
    env: Mapping[str, str] = {},
) -> tuple[int, str]:
    """Run a server command expected to refuse to start; return its exit code and output."""
    completed = subprocess.run(
        command_line(command, settings),
        capture_output=True,
        env={**server_environment(), **env},
        cwd=REPO_ROOT,
        timeout=timeout,
        check=False,
    )
    output = (completed.stdout + completed.stderr).decode(errors="replace")
    return completed.returncode, output
