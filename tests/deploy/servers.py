"""jobgate server commands run as real subprocesses, the way deploy/ runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from tests.helpers import wait_until
from tests.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]


class JobgateProcess:
    """`jobgate <command>` on free loopback ports, its output kept in a log file."""

    def __init__(self, command: str, log_dir: Path, *args: str) -> None:
        self.command = command
        self.port = free_port()
        self.metrics_port = free_port()
        self.log = log_dir / f"{command}-{self.port}.log"
        argv = [
            sys.executable, "-m", "jobgate.cli", command,
            "--listen", f"127.0.0.1:{self.port}",
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
            "--grace-period", "2",
            *args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=out)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_serving(self, timeout: float = 20.0) -> None:
        wait_until(self._serving, timeout, f"jobgate {self.command} did not start serving")

    def _serving(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"jobgate {self.command} exited:\n{self.output()}")
        with grpc.insecure_channel(self.target) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=1
                )
            except grpc.RpcError:
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def scrape(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as reply:
            text: str = reply.read().decode()
            return text

    def stop(self) -> int:
        """SIGTERM (the drain), then the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


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
