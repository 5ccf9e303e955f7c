"""Black-box harness: jobgate server processes on loopback.

Servers run as subprocesses of `python -m jobgate.cli`, exactly as an
operator would start them, configured only through DESIGN.md's flags, by the
shared launcher (tests/launcher.py): every listener on port 0, the bound
addresses read back from the process's announcement. A deployment is ready
when every process's gRPC health service answers SERVING; it is stopped with
SIGTERM, then SIGKILL after a deadline.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.launcher import (
    REPO_ROOT,
    JobgateServer,
    command_line,
    health_status,
    run_to_exit,
    server_environment,
)

__all__ = [
    "FAST_SETTINGS",
    "REPO_ROOT",
    "AuthFile",
    "Deployment",
    "ServerProcess",
    "Token",
    "attach_server_logs",
    "auth_entry",
    "command_line",
    "embedded_deployment",
    "health_status",
    "redis_deployment",
    "restart_process",
    "run_to_exit",
    "server_environment",
    "write_auth_file",
]

# Short timings so recovery-driven behaviour shows within seconds. The lease
# is long enough that a test which claims and answers at once never loses it
# on a busy 2-core machine, and short enough that expiry tests stay quick.
FAST_SETTINGS: Mapping[str, str] = {
    "lease-timeout": "2",
    "retry-backoff": "0.1",
    "grace-period": "2",
}

# The e2e name for the shared launcher's server process.
ServerProcess = JobgateServer


@dataclass
class Deployment:
    """A running set of servers: one `serve`, or gateways plus worker-servers on Redis.

    Every process listens on port 0; the targets are the addresses the
    processes announced, so they are known once `start()` has returned.
    """

    topology: str
    processes: list[ServerProcess]
    workdir: Path
    settings: dict[str, str] = field(default_factory=dict)
    auth: AuthFile | None = None

    def _targets(self, listener: str) -> list[str]:
        return [
            p.address(listener)
            for p in self.processes
            if p.announcement is not None and listener in p.announcement.addresses
        ]

    @property
    def job_targets(self) -> list[str]:
        return self._targets("job")

    @property
    def worker_targets(self) -> list[str]:
        return self._targets("worker")

    @property
    def job_target(self) -> str:
        return self.job_targets[0]

    @property
    def worker_target(self) -> str:
        return self.worker_targets[0]

    def start(self) -> Deployment:
        """Start every process, wait until all serve; on failure stop them all and re-raise."""
        try:
            # Start every process first so their start-ups overlap, then wait.
            for process in self.processes:
                if process.exited:
                    process.start()
            for process in self.processes:
                process.wait_serving()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for process in self.processes:
            process.send_sigterm()
        for process in self.processes:
            process.wait_exit()

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} =====\n{p.log_tail()}" for p in self.processes)


def embedded_deployment(
    workdir: Path, settings: Mapping[str, str], env: Mapping[str, str] = {}
) -> Deployment:
    """`jobgate serve` on the embedded store: both services in one process."""
    process = ServerProcess("serve", workdir / "serve.log", settings, env=env)
    return Deployment("embedded", [process], workdir, dict(settings))


def redis_deployment(
    workdir: Path,
    redis_url: str,
    partition: str,
    settings: Mapping[str, str],
    gateways: int = 1,
    worker_servers: int = 1,
) -> Deployment:
    """`jobgate gateway` and `jobgate worker-server` replicas sharing one Redis partition."""
    shared = {**settings, "redis-url": redis_url, "redis-partition": partition}
    processes = [
        ServerProcess(kind, workdir / f"{kind}-{index}.log", shared, name=f"{kind}-{index}")
        for kind, count in (("gateway", gateways), ("worker-server", worker_servers))
        for index in range(count)
    ]
    return Deployment("redis", processes, workdir, shared)


def restart_process(process: ServerProcess) -> None:
    """Start a stopped server again on the same addresses (same partition, same flags)."""
    process.restart()


@dataclass(frozen=True)
class Token:
    secret: str
    tenant: str
    role: str
    #: The auth entry's placement and fair-share keys (DESIGN "Placement", "Fair
    #: share"): a client's allowed pools and weight, a worker's pool; None leaves
    #: the key out of the entry.
    pools: tuple[str, ...] | None = None
    weight: int | None = None
    pool: str | None = None

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.secret}"),)


@dataclass(frozen=True)
class AuthFile:
    path: Path
    tokens: Sequence[Token]

    def client(self, tenant: str) -> Token:
        return next(t for t in self.tokens if t.role == "client" and t.tenant == tenant)

    def worker(self, pool: str | None = None) -> Token:
        """The first worker token, or the first whose entry names `pool`."""
        return next(
            t for t in self.tokens if t.role == "worker" and (pool is None or t.pool == pool)
        )

    def admin(self) -> Token:
        return next(t for t in self.tokens if t.role == "admin")


def auth_entry(token: Token) -> dict[str, object]:
    """One entry of the auth file: the token's SHA-256 and whichever keys it sets."""
    entry: dict[str, object] = {
        "sha256": hashlib.sha256(token.secret.encode()).hexdigest(),
        "tenant": token.tenant,
        "role": token.role,
    }
    if token.pools is not None:
        entry["pools"] = list(token.pools)
    if token.weight is not None:
        entry["weight"] = token.weight
    if token.pool is not None:
        entry["pool"] = token.pool
    return entry


def write_auth_file(path: Path, tokens: Sequence[Token]) -> AuthFile:
    """DESIGN's --auth-file: tokens stored only as SHA-256 hex."""
    path.write_text(json.dumps({"tokens": [auth_entry(t) for t in tokens]}))
    return AuthFile(path, tokens)


def attach_server_logs(item: pytest.Item, report: pytest.TestReport) -> None:
    """For a failed test, add the logs of every deployment it used to its report."""
    if not report.failed:
        return
    for name, value in getattr(item, "funcargs", {}).items():
        if isinstance(value, Deployment):
            report.sections.append((f"server logs: {name} ({value.topology})", value.logs()))
