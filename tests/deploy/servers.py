"""jobgate server commands run as real subprocesses, the way deploy/ runs them."""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path

import grpc

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from tests.launcher import JobgateServer

# Pairs of `--flag value`, as the deploy tests pass them.
_FLAG_PAIRS = 2


class JobgateProcess:
    """`jobgate <command>` started by the shared launcher (port 0, ports read back)."""

    def __init__(self, command: str, log_dir: Path, *args: str) -> None:
        self.command = command
        settings = {"grace-period": "2", **_settings_of(args)}
        log = log_dir / f"{command}-{uuid.uuid4().hex[:8]}.log"
        self.server = JobgateServer(command, log, settings)
        self.server.start()

    @property
    def port(self) -> int:
        return _port_of(self.server.target)

    @property
    def metrics_port(self) -> int:
        return _port_of(self.server.address("metrics"))

    @property
    def target(self) -> str:
        return self.server.target

    @property
    def metrics_url(self) -> str:
        return f"http://{self.server.address('metrics')}/metrics"

    def output(self) -> str:
        return self.server.output()

    def wait_serving(self, timeout: float = 20.0) -> None:
        self.server.wait_serving(timeout)

    def scrape(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as reply:
            text: str = reply.read().decode()
            return text

    def stop(self) -> int:
        """SIGTERM (the drain), then the exit code."""
        code = self.server.terminate(timeout=20)
        assert code is not None
        return code


def _settings_of(args: tuple[str, ...]) -> dict[str, str]:
    if len(args) % _FLAG_PAIRS or not all(flag.startswith("--") for flag in args[::2]):
        raise ValueError(f"expected --flag value pairs, got {args!r}")
    pairs = zip(args[::2], args[1::2], strict=True)
    return {flag.removeprefix("--"): value for flag, value in pairs}


def _port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def submit(target: str, model: str, tenant: str = "acme", payload: bytes = b"hello") -> str:
    """Submit one job over gRPC with the open-mode tenant header; returns its id."""
    with grpc.insecure_channel(target) as channel:
        reply = job_service_pb2_grpc.JobServiceStub(channel).Submit(
            job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model, payload=payload)),
            metadata=(("x-jobgate-tenant", tenant),),
            timeout=10,
        )
    job_id: str = reply.job.id
    return job_id
