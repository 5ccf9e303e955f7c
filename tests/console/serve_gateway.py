"""A real `jobgate serve` for the console's browser tests, and a driver that moves its jobs.

The process is started as an operator would (tests/launcher.py): the
embedded store, `--auth-file` holding the tokens of `fake_gateway.TOKENS`
(admin `ops`, clients `acme` and `globex`) plus two worker tokens (pools
`default` and `onprem`). The driver has the FakeGatewayThread's methods
(`create`, `claim`, `report`, `finish`, `status`), done the way clients and
workers do them: Submit with a client token, ClaimNext, Heartbeat and
SetResult with a worker token. Nothing reaches into the server.

A real claim takes the next job of a model, not a named one: `claim(job_id)`
claims the next job of that job's model and pool and fails the test when it
is another, so a test orders its jobs so that the one it claims is next
(`create` with a terminal status claims the job it has just submitted).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from jobgate.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from tests.console.fake_gateway import TOKENS
from tests.launcher import JobgateServer

S = job_pb2
CALL_TIMEOUT = 10.0
#: A worker token per pool the tests use.
WORKER_TOKENS = {"default": "worker-token", "onprem": "onprem-worker-token"}
#: Long enough that no lease of a test expires while it runs (no heartbeat loop here).
LEASE_SECONDS = "600"


def write_auth_file(path: Path) -> Path:
    entries: list[dict[str, str]] = []
    for secret, identity in TOKENS.items():
        entries.append({"sha256": _sha256(secret), "tenant": identity.tenant,
                        "role": identity.role})  # fmt: skip
    for pool, secret in WORKER_TOKENS.items():
        entries.append({"sha256": _sha256(secret), "tenant": "ops", "role": "worker",
                        "pool": pool})  # fmt: skip
    path.write_text(json.dumps({"tokens": entries}))
    return path


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _bearer(secret: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {secret}"),)


@dataclass
class Lease:
    lease_id: str
    worker_id: str
    pool: str


class ServeGateway:
    """`jobgate serve --auth-file ...` on loopback ports, and its driver."""

    def __init__(self, workdir: Path, *, console: bool = False) -> None:
        """`console`: also `--console-listen 127.0.0.1:0` (its URL in `console_url`)."""
        auth = write_auth_file(workdir / "auth.json")
        settings = {
            "listen": "127.0.0.1:0",
            "worker-listen": "127.0.0.1:0",
            "metrics-listen": "off",
            "auth-file": str(auth),
            "lease-timeout": LEASE_SECONDS,
        }
        if console:
            settings["console-listen"] = "127.0.0.1:0"
        self.server = JobgateServer("serve", workdir / "serve.log", settings)
        self.target = ""
        self.console_url = ""
        self._leases: dict[str, Lease] = {}
        self._channels: list[grpc.Channel] = []

    def start(self) -> ServeGateway:
        self.server.start()
        self.server.wait_serving()
        self.target = self.server.address("job")
        if "console-listen" in self.server.settings:
            self.console_url = f"http://{self.server.address('console')}"
        jobs = grpc.insecure_channel(self.target)
        workers = grpc.insecure_channel(self.server.address("worker"))
        self._channels = [jobs, workers]
        self.jobs = job_service_pb2_grpc.JobServiceStub(jobs)
        self.workers = worker_service_pb2_grpc.WorkerServiceStub(workers)
        return self

    def stop(self) -> None:
        for channel in self._channels:
            channel.close()
        self.server.terminate(timeout=15)

    # -- as a client

    def create(
        self,
        tenant: str,
        model: str,
        *,
        labels: dict[str, str] | None = None,
        priority: job_pb2.Priority.ValueType = S.PRIORITY_BATCH,
        pool: str = "",
        children: int = 0,
        max_parallel: int = 0,
        status: job_pb2.JobStatus.ValueType = S.JOB_STATUS_QUEUED,
        error_code: str = "BOOM",
        error_message: str = "",
        worker_id: str = "gpu-a-01",
    ) -> job_pb2.Job:
        """Submit a job (a group with `children`) and, for a terminal `status`, run it there.

        FAILED: the job (or every child) fails with `error_code`; COMPLETED: it
        completes; PARTIAL (a group of two or more): the first child completes
        and the others fail. The job answered is the one Get sees at the end.
        """
        spec = job_pb2.JobSpec(model=model, labels=labels or {}, pool=pool,
                               content_type="application/json")  # fmt: skip
        request = job_service_pb2.SubmitRequest(priority=priority)
        if children:
            request.group.CopyFrom(
                job_pb2.GroupSpec(children=[spec] * children, max_parallel=max_parallel)
            )
        else:
            request.job.CopyFrom(spec)
        job: job_pb2.Job = self.jobs.Submit(
            request, metadata=self._client(tenant), timeout=CALL_TIMEOUT
        ).job
        if children:  # the parent as Get shows it, with its children
            job = self.get(job.id)
        if status == S.JOB_STATUS_QUEUED:
            return job
        singles = [child.id for child in job.children] if children else [job.id]
        for index, single in enumerate(singles):
            self.claim(single, worker_id)
            completes = status == S.JOB_STATUS_COMPLETED or (
                status == S.JOB_STATUS_PARTIAL and index == 0
            )
            if completes:
                self.finish(single, result=b"ok")
            else:
                self.finish(single, S.JOB_STATUS_FAILED, error_code=error_code,
                            error_message=error_message)  # fmt: skip
        return self.get(job.id)

    def create_many(self, count: int, tenant: str, model: str, **options: Any) -> list[str]:
        return [self.create(tenant, model, **options).id for _ in range(count)]

    def get(self, job_id: str) -> job_pb2.Job:
        request = job_service_pb2.GetRequest(job_id=job_id)
        job: job_pb2.Job = self.jobs.Get(
            request, metadata=_bearer("admin-token"), timeout=CALL_TIMEOUT
        ).job
        return job

    def status(self, job_id: str) -> int:
        return self.get(job_id).status

    def newest_first(self, job_ids: Iterable[str]) -> list[str]:
        """`job_ids` in ListJobs' order: (create_time, id), newest first."""
        jobs = [self.get(job_id) for job_id in job_ids]
        jobs.sort(key=lambda job: (job.create_time.ToMicroseconds(), job.id), reverse=True)
        return [job.id for job in jobs]

    def list_ids(self, filter: str = "") -> list[str]:
        """Every job id an admin's ListJobs walk gives, in its order."""
        found: list[str] = []
        token = ""
        while True:
            request = job_service_pb2.ListJobsRequest(filter=filter, page_token=token)
            page = self.jobs.ListJobs(
                request, metadata=_bearer("admin-token"), timeout=CALL_TIMEOUT
            )
            found += [job.id for job in page.jobs]
            if not page.next_page_token:
                return found
            token = page.next_page_token

    def _client(self, tenant: str) -> tuple[tuple[str, str], ...]:
        secret = next(s for s, who in TOKENS.items() if who.tenant == tenant)
        return _bearer(secret)

    # -- as a worker

    def claim(self, job_id: str, worker_id: str = "gpu-1") -> None:
        job = self.get(job_id)
        pool = job.pool or "default"
        request = worker_service_pb2.ClaimNextRequest(
            worker_id=worker_id, models=[job.model], max_jobs=1, pool=pool
        )
        answer = self.workers.ClaimNext(
            request, metadata=_bearer(WORKER_TOKENS[pool]), timeout=CALL_TIMEOUT
        )
        claimed = [item.job.id for item in answer.jobs]
        if claimed != [job_id]:
            raise AssertionError(
                f"claiming {job_id} ({job.model}, pool {pool}) got {claimed}: "
                "the test must make the job it claims the next one"
            )
        self._leases[job_id] = Lease(answer.jobs[0].lease_id, worker_id, pool)

    def report(self, job_id: str, progress: float, stage: str = "") -> None:
        lease = self._leases[job_id]
        request = worker_service_pb2.HeartbeatRequest(
            job_id=job_id, lease_id=lease.lease_id, progress=progress, stage=stage
        )
        self.workers.Heartbeat(
            request, metadata=_bearer(WORKER_TOKENS[lease.pool]), timeout=CALL_TIMEOUT
        )

    def finish(
        self,
        job_id: str,
        status: int = S.JOB_STATUS_COMPLETED,
        *,
        result: bytes = b"",
        content_type: str = "text/plain",
        error_code: str = "",
        error_message: str = "",
    ) -> None:
        lease = self._leases.pop(job_id)
        request = worker_service_pb2.SetResultRequest(
            job_id=job_id,
            lease_id=lease.lease_id,
            status=status,  # type: ignore[arg-type]
            result=result,
            result_content_type=content_type if result else "",
            error_code=error_code,
            error_message=error_message,
            retryable=False,
        )
        self.workers.SetResult(
            request, metadata=_bearer(WORKER_TOKENS[lease.pool]), timeout=CALL_TIMEOUT
        )
