"""A private redis-server per test session (or per test) on a free port.

Tests never touch the machine's Redis on 6379: each `RedisServer` runs in
its own temp dir so a test may stop, restart or kill it.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

# Ports handed out below the kernel's ephemeral range (32768+ here): a port the
# kernel picked for us with bind(0) can be taken by an outgoing connection
# before the server we start binds it.
_PORT_RANGE = (20000, 32000)


def free_port() -> int:
    """A loopback port that is free now, outside the ephemeral range."""
    for _ in range(200):
        port = random.randrange(*_PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port found")


def require_redis_server() -> str:
    """Path of redis-server; skip without it, but fail under JOBGATE_REQUIRE_REDIS=1."""
    path = shutil.which("redis-server")
    if path is None:
        message = "redis-server is not on PATH"
        if os.environ.get("JOBGATE_REQUIRE_REDIS") == "1":
            pytest.fail(message + " (JOBGATE_REQUIRE_REDIS=1)")
        pytest.skip(message)
    return path


class _PortTaken(RuntimeError):
    """redis-server could not bind its port."""


class RedisServer:
    def __init__(self, workdir: Path, *extra_args: str) -> None:
        self.binary = require_redis_server()
        self.workdir = workdir
        self.port = free_port()
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        """Start, moving to another port if someone took this one meanwhile."""
        for _ in range(5):
            try:
                self._start_once(timeout)
                return
            except _PortTaken:
                self.port = free_port()
        self._start_once(timeout)

    def _start_once(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.workdir),
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "no",
            "--logfile", str(self.workdir / "redis.log"),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.workdir / "redis.log").read_text(errors="replace")
                if "Address already in use" in log:
                    raise _PortTaken(log)
                raise RuntimeError(f"redis-server exited at start:\n{log}")
            if self._answers_ping():
                return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *words: str) -> bytes:
        """Send one inline command and return the raw reply (for INFO and CONFIG in tests)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(" ".join(words).encode() + b"\r\n")
            reply = b""
            while True:
                chunk = sock.recv(65536)
                reply += chunk
                if not chunk or _reply_complete(reply):
                    return reply

    def info_field(self, section: str, name: str) -> str:
        """One field of INFO <section>, e.g. info_field("stats", "total_commands_processed")."""
        for line in self.command("INFO", section).decode().splitlines():
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
        raise KeyError(name)

    def stop(self) -> None:
        """Graceful stop (SIGTERM: Redis flushes its AOF)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """Hard kill (SIGKILL), as a crash would."""
        self._signal(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        self.process.wait(timeout=10)


def _reply_complete(reply: bytes) -> bool:
    """True once a RESP simple/error/integer line or a whole bulk string has arrived."""
    if reply[:1] != b"$":
        return reply.endswith(b"\r\n")
    header, _, body = reply.partition(b"\r\n")
    length = int(header[1:])
    return length < 0 or len(body) >= length + 2
