"""The fault harness: a real redis-server, gateway and worker-server replicas,
`jobgate worker` daemons running the ledger handler, a client that records
every call and answer, and the final drain that gathers the `Ledger`.

Servers come from tests/e2e/harness.py as they are; a worker is one more
subprocess of `python -m jobgate.cli worker`, its JSON log parsed for the
daemon's own word on refused calls (LEASE_LOST). Every worker process gets a
fresh worker id, so a restarted worker never shares evidence with the one
killed before it.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import redis
from prometheus_client.parser import text_string_to_metric_families

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from store.keys import Keys, partition_tags
from tests.e2e.api import duration
from tests.e2e.harness import AuthFile, Deployment, Token, redis_deployment
from tests.faults import handlers
from tests.faults.ledger import (
    DIED,
    TERMINAL,
    Attempt,
    Call,
    Check,
    Event,
    Final,
    Ledger,
    Refusal,
    Stop,
    check_all,
    doubled,
    percentile,
    recovery_times,
)
from tests.launcher import JobgateServer
from tests.redis_server import RedisServer

#: The pool a worker credential without `pool` serves, and every open-mode worker
#: that names none (DESIGN "Placement").
DEFAULT_POOL = "default"
#: Short timings: a lease of one second, retries almost at once.
FAULT_SETTINGS: Mapping[str, str] = {
    "lease-timeout": "1",
    "retry-backoff": "0.05",
    "grace-period": "1",
    "max-attempts": "10",
    "metrics-listen": "127.0.0.1:0",
}
#: Client answers worth retrying (AIP-194), with the same idempotency key.
# As JobClient's (jobgate/client/_retry.py), with DEADLINE_EXCEEDED: a server
# shutting down cancels the calls it had taken but not started (CANCELLED).
RETRYABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED}
)
CALL_TIMEOUT = 5.0
HANDLER = "tests.faults.handlers:ledger"


def status_name(value: int) -> str:
    return job_pb2.JobStatus.Name(value).removeprefix("JOB_STATUS_").lower()  # type: ignore[arg-type]


def kind_name(value: int) -> str:
    return job_pb2.JobKind.Name(value).removeprefix("JOB_KIND_").lower()  # type: ignore[arg-type]


def payload(sleep: float = 0.0, mode: str = "ok") -> bytes:
    return json.dumps({"sleep": sleep, "mode": mode}).encode()


async def until(condition: Any, timeout: float, interval: float = 0.05) -> bool:
    """Poll `condition()` (sync or async) until true or the deadline; its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value or time.monotonic() >= deadline:
            return bool(value)
        await asyncio.sleep(interval)


class DaemonProcess(JobgateServer):
    """A `jobgate worker` daemon by the shared launcher: its own argv, no server to wait for."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: Mapping[str, str]) -> None:
        super().__init__("worker", log_path, env=env, name=name)
        self._argv = argv

    @property
    def argv(self) -> list[str]:
        return self._argv


@dataclass
class WorkerProcess:
    """One `jobgate worker` daemon."""

    worker_id: str
    process: DaemonProcess

    @property
    def alive(self) -> bool:
        return not self.process.exited


@dataclass
class Figures:
    """What one scenario measured, for docs/reliability.md."""

    scenario: str
    jobs: int = 0
    faults: int = 0
    lost: int = 0
    doubled: int = 0
    recovery_p99: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


class Rig:
    """One scenario's deployment on its own Redis partition."""

    def __init__(
        self,
        workdir: Path,
        redis_server: RedisServer,
        settings: Mapping[str, str] = FAULT_SETTINGS,
        gateways: int = 1,
        worker_servers: int = 1,
        redis_url: str | None = None,
        auth: AuthFile | None = None,
    ) -> None:
        self.workdir = workdir
        self.redis = redis_server
        self.partition = f"f{uuid.uuid4().hex[:10]}"
        self.settings = dict(settings)
        #: With an auth file, every call carries its tenant's or worker's token.
        self.auth = auth
        if auth is not None:
            self.settings["auth-file"] = str(auth.path)
        self.deployment: Deployment = redis_deployment(
            workdir / "servers",
            redis_url or redis_server.url,
            self.partition,
            self.settings,
            gateways=gateways,
            worker_servers=worker_servers,
        ).start()
        self.model = f"m{uuid.uuid4().hex[:8]}"
        self.ledger_path = workdir / "ledger.jsonl"
        self.workers: list[WorkerProcess] = []
        #: worker id -> the pool it claims for (the placement oracle's evidence).
        self.worker_pools: dict[str, str] = {}
        self.stops: list[Stop] = []
        self.calls: list[Call] = []
        self.accepted: set[str] = set()
        #: Evidence of a test that is its own worker (races), merged into the ledger.
        self.extra_attempts: list[Attempt] = []
        self.extra_refusals: list[Refusal] = []
        self._channels = [grpc.aio.insecure_channel(t) for t in self.deployment.job_targets]
        self.stubs = [job_service_pb2_grpc.JobServiceStub(c) for c in self._channels]
        self._generation = 0
        # Its own generator: hypothesis (the fuzzer, on another thread) fails a run
        # when the global one moves under it.
        self._random = random.Random()

    @property
    def job_channel(self) -> grpc.aio.Channel:
        """The channel to gateway-0."""
        return self._channels[0]

    # ------------------------------------------------------------------ workers

    def start_worker(
        self,
        concurrency: int = 2,
        target: int | None = None,
        *,
        pool: str = "",
        token: Token | None = None,
    ) -> WorkerProcess:
        """A daemon on the next worker-server (or `target`'s), with `--pool` when `pool`
        is given and `token` as its credential; it claims for `pool`, else the token's."""
        targets = self.deployment.worker_targets
        chosen = targets[self._generation % len(targets)] if target is None else targets[target]
        self._generation += 1
        worker_id = f"w{self._generation}-{uuid.uuid4().hex[:6]}"
        argv = [
            sys.executable, "-m", "jobgate.cli", "worker",
            "--target", chosen, "--model", self.model, "--handler", HANDLER,
            "--concurrency", str(concurrency), "--worker-id", worker_id,
            "--log-format", "json", "--grace-period", "5", "--claim-wait", "1",
            "--progress-interval", "0.2",
        ]  # fmt: skip
        env = {handlers.LEDGER_ENV: str(self.ledger_path)}
        if pool:
            argv += ["--pool", pool]
        if token is not None:
            env["JOBGATE_WORKER_TOKEN"] = token.secret
        credential_pool = token.pool if token is not None and token.pool else DEFAULT_POOL
        self.worker_pools[worker_id] = pool or credential_pool
        process = DaemonProcess(worker_id, argv, self.workdir / f"{worker_id}.log", env=env)
        process.start()
        worker = WorkerProcess(worker_id, process)
        self.workers.append(worker)
        return worker

    def signal_worker(self, worker: WorkerProcess, sig: signal.Signals) -> None:
        popen = worker.process.process
        assert popen is not None
        self.stops.append(Stop(worker.worker_id, time.time(), sig.name))
        popen.send_signal(sig)

    def kill_worker(self, worker: WorkerProcess) -> None:
        self.signal_worker(worker, signal.SIGKILL)
        worker.process.kill()

    def note_deaths(self) -> None:
        """Record a Stop for each worker that died on its own (a poison job kills its
        worker): at its handler's last word, else now."""
        killed = {s.worker_id for s in self.stops if s.kind == "SIGKILL"}
        dead = [w for w in self.workers if not w.alive and w.worker_id not in killed]
        if not dead:
            return
        last_words = {
            a.worker_id: a.end for a in self.read_attempts() if a.outcome == DIED and a.end
        }
        for worker in dead:
            when = last_words.get(worker.worker_id) or time.time()
            self.stops.append(Stop(worker.worker_id, when, "SIGKILL"))

    def alive_workers(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive]

    # ------------------------------------------------------------------ client

    def metadata(self, tenant: str) -> tuple[tuple[str, str], ...]:
        """How `tenant` calls: its token with an auth file, else the open-mode header."""
        if self.auth is not None:
            return self.auth.client(tenant).metadata
        return (("x-jobgate-tenant", tenant),)

    def _record(
        self,
        method: str,
        job_id: str,
        start: float,
        code: str = "OK",
        reason: str = "",
        status: str = "",
    ) -> None:
        self.calls.append(Call(method, job_id, start, time.time(), code, reason, status))

    async def submit(
        self,
        tenant: str,
        request: job_service_pb2.SubmitRequest,
        *,
        patience: float = 60.0,
        first: int | None = None,
    ) -> str:
        """Submit with the request's key, retrying UNAVAILABLE on the next replica."""
        deadline = time.monotonic() + patience
        index = self._random.randrange(len(self.stubs)) if first is None else first
        failures = 0
        while True:
            stub = self.stubs[index % len(self.stubs)]
            start = time.time()
            try:
                response: job_service_pb2.SubmitResponse = await stub.Submit(
                    request, metadata=self.metadata(tenant), timeout=CALL_TIMEOUT
                )
            except grpc.aio.AioRpcError as error:
                self._record("Submit", request.idempotency_key, start, error.code().name)
                if error.code() not in RETRYABLE or time.monotonic() > deadline:
                    raise
                failures += 1
                index += 1
                await asyncio.sleep(min(1.0, 0.05 * 2**failures) * self._random.uniform(0.5, 1))
                continue
            job = response.job
            self._record("Submit", job.id, start, status=status_name(job.status))
            self.accepted.add(job.id)
            return job.id

    async def submit_job(
        self,
        tenant: str,
        work: bytes,
        *,
        max_attempts: int = 0,
        run_timeout: float = 0.0,
        key: str | None = None,
        first: int | None = None,
        model: str | None = None,
        pool: str = "",
    ) -> str:
        spec = job_pb2.JobSpec(
            model=model or self.model, payload=work, max_attempts=max_attempts, pool=pool
        )
        if run_timeout:
            spec.run_timeout.CopyFrom(duration(run_timeout))
        request = job_service_pb2.SubmitRequest(
            idempotency_key=key or uuid.uuid4().hex, priority=job_pb2.PRIORITY_BATCH, job=spec
        )
        return await self.submit(tenant, request, first=first)

    async def get(self, tenant: str, job_id: str) -> job_pb2.Job | None:
        """The job, retrying UNAVAILABLE; None when NOT_FOUND."""
        for attempt in range(40):
            stub = self.stubs[attempt % len(self.stubs)]
            start = time.time()
            try:
                response: job_service_pb2.GetResponse = await stub.Get(
                    job_service_pb2.GetRequest(job_id=job_id),
                    metadata=self.metadata(tenant),
                    timeout=CALL_TIMEOUT,
                )
            except grpc.aio.AioRpcError as error:
                self._record("Get", job_id, start, error.code().name)
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    return None
                if error.code() not in RETRYABLE:
                    raise
                await asyncio.sleep(0.1)
                continue
            self._record("Get", job_id, start, status=status_name(response.job.status))
            return response.job
        raise AssertionError(f"Get {job_id} kept failing")

    # ------------------------------------------------------------------ drain

    async def drain(
        self, tenants: Mapping[str, Sequence[str]], timeout: float = 60.0
    ) -> dict[str, job_pb2.Job | None]:
        """Wait until every job (and every group's child) is terminal or gone; the snapshots."""
        pending = {job_id: tenant for tenant, ids in tenants.items() for job_id in ids}
        done: dict[str, job_pb2.Job | None] = {}
        gate = asyncio.Semaphore(32)
        deadline = time.monotonic() + timeout

        async def look(job_id: str, tenant: str) -> None:
            async with gate:
                job = await self.get(tenant, job_id)
            if job is None or status_name(job.status) in TERMINAL:
                done[job_id] = job
                pending.pop(job_id, None)
                for child in job.children if job is not None else ():
                    if child.id not in done:
                        pending[child.id] = tenant

        while pending and time.monotonic() < deadline:
            await asyncio.gather(*(look(j, t) for j, t in list(pending.items())))
            if pending:
                await asyncio.sleep(0.2)
        for job_id, tenant in list(pending.items()):
            done[job_id] = await self.get(tenant, job_id)
        return done

    # ------------------------------------------------------------------ evidence

    def read_attempts(self) -> list[Attempt]:
        starts: dict[tuple[str, str], dict[str, Any]] = {}
        ends: dict[tuple[str, str], dict[str, Any]] = {}
        if self.ledger_path.exists():
            for line in self.ledger_path.read_text().splitlines():
                entry = json.loads(line)
                key = (entry["job_id"], entry["lease_id"])
                (starts if entry["event"] == "start" else ends)[key] = entry
        attempts = []
        for key, start in starts.items():
            end = ends.get(key)
            attempts.append(
                Attempt(
                    job_id=start["job_id"],
                    attempt=int(start["attempt"]),
                    lease_id=start["lease_id"],
                    worker_id=start["worker_id"],
                    start=float(start["time"]),
                    end=None if end is None else float(end["time"]),
                    outcome="" if end is None else str(end["outcome"]),
                )
            )
        return attempts

    def read_refusals(self) -> list[Refusal]:
        refusals = []
        for worker in self.workers:
            path = worker.process.log_path
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                if not line.startswith("{"):
                    continue
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                why = str(entry.get("why", ""))
                if entry.get("message") != "job stopped without a result":
                    continue
                for reason in ("LEASE_LOST", "JOB_CANCELLED"):
                    if reason in why:
                        when = datetime.fromisoformat(entry["time"]).timestamp()
                        refusals.append(
                            Refusal(str(entry["job_id"]), worker.worker_id, reason, when)
                        )
        return refusals

    async def cancel(self, tenant: str, job_id: str) -> job_service_pb2.CancelResponse:
        start = time.time()
        response: job_service_pb2.CancelResponse = await self.stubs[0].Cancel(
            job_service_pb2.CancelRequest(job_id=job_id),
            metadata=self.metadata(tenant),
            timeout=CALL_TIMEOUT,
        )
        self._record("Cancel", job_id, start, status=status_name(response.job.status))
        return response

    def _attempts_settled(self) -> bool:
        stopped = {s.worker_id for s in self.stops}
        alive = {w.worker_id for w in self.alive_workers()} - stopped
        return all(a.end is not None for a in self.read_attempts() if a.worker_id in alive)

    def redis_client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.redis.port, socket_timeout=10)

    @property
    def partition_keys(self) -> list[Keys]:
        """The keys of every partition of the deployment (--redis-partitions)."""
        count = int(self.settings.get("redis-partitions", "1"))
        return [Keys(tag) for tag in partition_tags(self.partition, count)]

    def read_stream(self) -> list[tuple[tuple[int, int, int], dict[str, str]]]:
        """Every partition's audit stream merged as the store merges them: by stream id
        (the Redis clock's ms, then the sequence), the lower partition on a tie; each
        entry's sort key (ms, sequence, partition) and fields."""
        entries = []
        with self.redis_client() as client:
            for index, keys in enumerate(self.partition_keys):
                for stream_id, raw in client.xrange(keys.events, "-", "+"):
                    ms, _, seq = stream_id.decode().partition("-")
                    fields = {k.decode(): v.decode() for k, v in raw.items()}
                    entries.append(((int(ms), int(seq), index), fields))
        entries.sort(key=lambda entry: entry[0])
        return entries

    def read_events(self) -> list[Event]:
        events = []
        for _, fields in self.read_stream():
            events.append(
                Event(
                    job_id=fields["job_id"],
                    from_status=fields.get("from", ""),
                    to_status=fields["to"],
                    attempts=int(fields.get("attempts") or 0),
                    parent_id=fields.get("parent_job_id", ""),
                    tenant=fields.get("tenant", ""),
                    error_code=fields.get("error_code", ""),
                    worker_id=fields.get("worker_id", ""),
                )
            )
        return events

    def read_counters(self) -> dict[str, int]:
        """The admission counters, summed over the partitions."""
        counters: dict[str, int] = {"*": 0}
        with self.redis_client() as client:
            for keys in self.partition_keys:
                for tenant, count in client.hgetall(keys.live).items():
                    name = tenant.decode()
                    counters[name] = counters.get(name, 0) + int(count)
                counters["*"] += int(client.get(keys.live_total) or 0)
        return counters

    def worker_calls(self, method: str) -> dict[str, float]:
        """WorkerService `method` calls the worker-servers answered, by gRPC code: their
        grpc_server_handled_total, summed over the replicas' /metrics."""
        counts: dict[str, float] = {}
        for process in self.deployment.processes:
            if process.command != "worker-server":
                continue
            url = f"http://{process.address('metrics')}/metrics"
            with urllib.request.urlopen(url, timeout=CALL_TIMEOUT) as reply:
                text = reply.read().decode()
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    labels = sample.labels
                    if (
                        sample.name == "grpc_server_handled_total"
                        and labels.get("grpc_service") == "jobgate.v1.WorkerService"
                        and labels.get("grpc_method") == method
                    ):
                        code = labels["grpc_code"]
                        counts[code] = counts.get(code, 0.0) + sample.value
        return counts

    async def collect(self, tenants: Mapping[str, Sequence[str]], timeout: float = 60.0) -> Ledger:
        """Drain, then gather every piece of evidence into a Ledger."""
        snapshots = await self.drain(tenants, timeout)
        # A handler told of a lost lease stops on its next heartbeat, maybe after
        # its job ended: wait for the open attempts of untouched live workers.
        await until(self._attempts_settled, 10)
        finals = {
            job_id: Final(
                job_id=job.id,
                tenant=job.tenant,
                status=status_name(job.status),
                attempts=job.attempts,
                max_attempts=job.max_attempts,
                kind=kind_name(job.kind),
                parent_id=job.parent_id,
                max_parallel=job.max_parallel,
                error_code=job.error_code,
                pool=job.pool,
                child_index=job.child_index,
            )
            for job_id, job in snapshots.items()
            if job is not None
        }
        return Ledger(
            accepted=set(self.accepted),
            attempts=self.read_attempts() + self.extra_attempts,
            refusals=self.read_refusals() + self.extra_refusals,
            stops=list(self.stops),
            calls=list(self.calls),
            finals=finals,
            events=self.read_events(),
            counters=self.read_counters(),
            workers={w.worker_id for w in self.workers}
            | {a.worker_id for a in self.extra_attempts},
            worker_pools=dict(self.worker_pools),
        )

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close(None)
        for worker in self.workers:
            worker.process.send_sigterm()
        for worker in self.workers:
            worker.process.wait_exit(timeout=5)
        self.deployment.stop()

    def logs(self) -> str:
        workers = "\n".join(
            f"===== {w.worker_id} =====\n{w.process.log_tail(3000)}" for w in self.workers
        )
        return self.deployment.logs() + "\n" + workers


async def submit_many(
    rig: Rig,
    tenant: str,
    count: int,
    work: bytes,
    *,
    parallel: int = 16,
    first: int | None = None,
    **fields: Any,
) -> list[str]:
    """Submit `count` keyed jobs, `parallel` at a time; their ids in submit order."""
    gate = asyncio.Semaphore(parallel)

    async def one() -> str:
        async with gate:
            return await rig.submit_job(tenant, work, first=first, **fields)

    return list(await asyncio.gather(*(one() for _ in range(count))))


def figures_of(scenario: str, ledger: Ledger, faults: int, **notes: Any) -> Figures:
    """The standard figures of a scenario from its ledger."""
    lost = sum(1 for job_id in ledger.known_jobs() if job_id not in ledger.finals)
    return Figures(
        scenario=scenario,
        jobs=len(ledger.known_jobs()),
        faults=faults,
        lost=lost,
        doubled=doubled(ledger),
        recovery_p99=round(percentile(recovery_times(ledger), 0.99), 3),
        notes=notes,
    )


async def steady_load(
    rig: Rig,
    tenant: str,
    work: bytes,
    stop: asyncio.Event,
    *,
    parallel: int = 4,
    pause: float = 0.02,
    first: int | None = None,
    tolerate: frozenset[grpc.StatusCode] = frozenset(),
    **fields: Any,
) -> list[str]:
    """Keep submitting keyed jobs from `parallel` loops until `stop`; every id accepted.
    A refusal with a `tolerate`d code (e.g. RESOURCE_EXHAUSTED) is backed off from."""
    ids: list[str] = []

    async def loop() -> None:
        while not stop.is_set():
            try:
                ids.append(await rig.submit_job(tenant, work, first=first, **fields))
            except grpc.aio.AioRpcError as error:
                if error.code() not in tolerate:
                    raise
                await asyncio.sleep(0.1)
            await asyncio.sleep(pause)

    await asyncio.gather(*(loop() for _ in range(parallel)))
    return ids


class Load:
    """A steady load running in the background: `async with Load(...) as load: ...; load.ids`."""

    def __init__(self, rig: Rig, tenant: str, work: bytes, **options: Any) -> None:
        self._stop = asyncio.Event()
        self._args = (rig, tenant, work, self._stop)
        self._options = options
        self._task: asyncio.Task[list[str]] | None = None
        self.ids: list[str] = []

    async def __aenter__(self) -> Load:
        self._task = asyncio.create_task(steady_load(*self._args, **self._options))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        self.ids = await self._task


def verdict(ledger: Ledger, *, ran: bool = True, extra: Sequence[Check] = ()) -> list[str]:
    """Every invariant's violations, plus any sign the evidence itself is missing
    (a vacuous pass: wrong partition, empty ledger file)."""
    problems = check_all(ledger, extra=extra)
    if not ledger.events:
        problems.append("evidence: no audit events were read")
    if ran and not ledger.attempts:
        problems.append("evidence: the handler ledger is empty")
    if not ledger.calls:
        problems.append("evidence: no client calls were recorded")
    return problems


def assert_clean(ledger: Ledger, *, ran: bool = True, extra: Sequence[Check] = ()) -> None:
    """Fail with a count per check and the first violations, one a line."""
    problems = verdict(ledger, ran=ran, extra=extra)
    if problems:
        counts: dict[str, int] = {}
        for problem in problems:
            name = problem.split(":")[0]
            counts[name] = counts.get(name, 0) + 1
        raise AssertionError(f"{counts}\n" + "\n".join(problems[:30]))
