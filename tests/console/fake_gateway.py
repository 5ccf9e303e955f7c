"""An in-memory JobService with real behaviour, for the console's tests.

Unlike tests/client/fake_job_service.py (scripted answers), this one keeps
jobs: tenants from bearer tokens (or open mode), the admin role, ListJobs
with DESIGN's filter grammar and keyset page tokens, RetryJob, Cancel,
ListWorkers, ListQueues, and StreamStatus pushing each change. Tests move
jobs along with the driver methods (`claim`, `report`, `finish`), which a
worker would do over WorkerService against a real gateway.

It runs on its own event loop in a thread (`FakeGatewayThread`), so sync
tests (Starlette's TestClient, the browser) and the console's own loop can
all reach it. It counts StreamStatus calls: `stream_calls` in all and
`open_streams` now.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from google.protobuf import timestamp_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from ulid import ULID

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from jobgate.v1.errors import ERROR_DOMAIN

T = TypeVar("T")
S = job_pb2.JobStatus
TERMINAL = {
    S.JOB_STATUS_COMPLETED,
    S.JOB_STATUS_FAILED,
    S.JOB_STATUS_CANCELLED,
    S.JOB_STATUS_PARTIAL,
}
LIVE = {S.JOB_STATUS_HELD, S.JOB_STATUS_QUEUED, S.JOB_STATUS_PROCESSING}


@dataclass(frozen=True)
class Identity:
    tenant: str
    role: str  # client | admin | worker


#: The tokens the fake knows, and who they are.
TOKENS = {
    "admin-token": Identity("ops", "admin"),
    "acme-token": Identity("acme", "client"),
    "globex-token": Identity("globex", "client"),
    "worker-token": Identity("gpu", "worker"),
}


class Abort(Exception):
    def __init__(self, code: int, message: str, reason: str = "", field_name: str = "") -> None:
        super().__init__(message)
        self.code, self.message, self.reason, self.field_name = code, message, reason, field_name

    def status(self) -> grpc.Status:
        status = status_pb2.Status(code=self.code, message=self.message)
        if self.reason:
            info = error_details_pb2.ErrorInfo(reason=self.reason, domain=ERROR_DOMAIN)
            status.details.add().Pack(info)
        if self.field_name:
            violation = error_details_pb2.BadRequest.FieldViolation(
                field=self.field_name, description=self.message
            )
            status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[violation]))
        return rpc_status.to_status(status)


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


# ---------------------------------------------------------------- filters

_ENUMS = {
    "status": (job_pb2.JobStatus, "JOB_STATUS_"),
    "kind": (job_pb2.JobKind, "JOB_KIND_"),
    "priority": (job_pb2.Priority, "PRIORITY_"),
}
_STRINGS = ("model", "pool", "parent_id", "error_code", "tenant")
_TERM = re.compile(
    r'\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|=|<|>)\s*("(?:[^"\\]|\\.)*"|[^\s"]+)\s*$'
)


def _unquote(raw: str) -> str:
    if raw.startswith('"'):
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def parse_filter(text: str, admin: bool) -> Callable[[job_pb2.Job], bool]:
    tests: list[Callable[[job_pb2.Job], bool]] = []
    for term in re.split(r"\s+AND\s+", f" {text} ") if text.strip() else []:
        if not term.strip():
            continue
        match = _TERM.match(term)
        if match is None:
            raise Abort(
                code_pb2.INVALID_ARGUMENT, f"not understood: {term.strip()[:64]}", "", "filter"
            )
        name, op, value = match.group(1), match.group(2), _unquote(match.group(3))
        tests.append(_comparison(name, op, value, admin))
    return lambda job: all(test(job) for test in tests)


def _comparison(name: str, op: str, value: str, admin: bool) -> Callable[[job_pb2.Job], bool]:
    def bad(why: str) -> Abort:
        return Abort(code_pb2.INVALID_ARGUMENT, f"{name}: {why}", "", "filter")

    if name == "create_time":
        if op == "=":
            raise bad("compare with <, <=, > or >=")
        stamp = timestamp_pb2.Timestamp()
        try:
            stamp.FromJsonString(value)
        except ValueError:
            raise bad("expected an RFC 3339 time") from None
        limit = stamp.ToNanoseconds()
        ops: dict[str, Callable[[int], bool]] = {
            "<": lambda n: n < limit,
            "<=": lambda n: n <= limit,
            ">": lambda n: n > limit,
            ">=": lambda n: n >= limit,
        }
        return lambda job: ops[op](job.create_time.ToNanoseconds())
    if op != "=":
        raise bad("compare with =")
    if name in _ENUMS:
        enum, prefix = _ENUMS[name]
        try:
            number = enum.Value(prefix + value.upper())
        except ValueError:
            raise bad(f"unknown value {value[:32]}") from None
        return lambda job: bool(getattr(job, name) == number)
    if name == "tenant" and not admin:
        raise bad("only admin callers may filter on tenant")
    if name in _STRINGS:
        return lambda job: bool(getattr(job, name) == value)
    if name.startswith("labels.") and len(name) > 7:
        key = name[7:]
        return lambda job: job.labels.get(key) == value
    raise bad("unknown field")


def _page_token(expression: str, key: tuple[int, str]) -> str:
    document = {"f": hashlib.sha256(expression.encode()).hexdigest()[:16], "k": list(key)}
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode()


def _after(token: str, expression: str) -> tuple[int, str] | None:
    if not token:
        return None
    try:
        document = json.loads(base64.urlsafe_b64decode(token))
        if document["f"] != hashlib.sha256(expression.encode()).hexdigest()[:16]:
            raise ValueError
        return int(document["k"][0]), str(document["k"][1])
    except (ValueError, KeyError, TypeError, IndexError):
        raise Abort(code_pb2.INVALID_ARGUMENT, "bad page token", "", "page_token") from None


def _key(job: job_pb2.Job) -> tuple[int, str]:
    return (job.create_time.ToNanoseconds(), job.id)


# ---------------------------------------------------------------- the service


@dataclass
class WorkerSeen:
    pool: str
    models: list[str]
    last_seen: timestamp_pb2.Timestamp
    job_ids: set[str] = field(default_factory=set)


class FakeGateway(job_service_pb2_grpc.JobServiceServicer):
    """JobService in memory. `tokens=None` runs open (every caller an admin)."""

    def __init__(
        self, tokens: dict[str, Identity] | None = TOKENS, *, unimplemented: bool = False
    ) -> None:
        self.tokens = tokens
        #: Answer the new RPCs UNIMPLEMENTED, as gateways before the store work do.
        self.unimplemented = unimplemented
        self.jobs: dict[str, job_pb2.Job] = {}
        self.workers: dict[str, WorkerSeen] = {}
        self.stream_calls = 0
        self.open_streams = 0
        self.retried: list[str] = []
        self._last_ms = 0
        self._changed: asyncio.Condition | None = None

    # -- identity

    def _caller(self, context: Any) -> Identity:
        headers = {k: str(v) for k, v in context.invocation_metadata() or ()}
        if self.tokens is None:
            return Identity(headers.get("x-jobgate-tenant", "default"), "admin")
        scheme, _, token = headers.get("authorization", "").partition(" ")
        found = self.tokens.get(token) if scheme.lower() == "bearer" else None
        if found is None:
            raise Abort(code_pb2.UNAUTHENTICATED, "unknown bearer token")
        if found.role == "worker":
            raise Abort(code_pb2.PERMISSION_DENIED, "a worker token may not call this service")
        return found

    def _visible(self, caller: Identity, job_id: str) -> job_pb2.Job:
        job = self.jobs.get(job_id)
        if job is None or (caller.role != "admin" and job.tenant != caller.tenant):
            raise Abort(code_pb2.NOT_FOUND, f"job {job_id[:32]} not found", "JOB_NOT_FOUND")
        return job

    # -- state changes (on the loop)

    def _new_id(self) -> tuple[str, timestamp_pb2.Timestamp]:
        self._last_ms = max(int(time.time() * 1000), self._last_ms + 1)
        stamp = timestamp_pb2.Timestamp()
        stamp.FromMilliseconds(self._last_ms)
        return str(ULID.from_timestamp(self._last_ms / 1000)), stamp

    def create(
        self,
        tenant: str,
        model: str,
        *,
        labels: dict[str, str] | None = None,
        priority: job_pb2.Priority.ValueType = job_pb2.PRIORITY_BATCH,
        pool: str = "",
        children: int = 0,
        max_parallel: int = 0,
        status: job_pb2.JobStatus.ValueType = job_pb2.JOB_STATUS_QUEUED,
        error_code: str = "",
    ) -> job_pb2.Job:
        job_id, stamp = self._new_id()
        job = job_pb2.Job(
            id=job_id,
            tenant=tenant,
            model=model,
            labels=labels or {},
            priority=priority,
            pool=pool,
            status=status,
            kind=job_pb2.JOB_KIND_SINGLE,
            max_attempts=3,
            create_time=stamp,
            update_time=stamp,
            content_type="application/json",
            error_code=error_code,
            idempotency_key=f"key-{job_id[-6:]}",
        )
        if status == job_pb2.JOB_STATUS_QUEUED:
            job.queue_position = sum(1 for j in self.jobs.values() if j.status == status)
        if status in TERMINAL:
            job.end_time.CopyFrom(stamp)
        self.jobs[job_id] = job
        if children:
            job.kind = job_pb2.JOB_KIND_GROUP
            job.max_parallel = max_parallel
            for index in range(children):
                held = max_parallel and index >= max_parallel
                child = self.create(
                    tenant,
                    model,
                    labels=labels,
                    priority=priority,
                    pool=pool,
                    status=job_pb2.JOB_STATUS_HELD if held else job_pb2.JOB_STATUS_QUEUED,
                )
                child.kind, child.parent_id, child.child_index = (
                    job_pb2.JOB_KIND_CHILD,
                    job_id,
                    index,
                )
                job.children.add(id=child.id, child_index=index, status=child.status)
        self._notify()
        return job

    def _touch(self, job: job_pb2.Job) -> None:
        job.update_time.CopyFrom(_now())
        if job.status in TERMINAL:
            job.end_time.CopyFrom(job.update_time)
            job.ClearField("queue_position")
        if job.status != job_pb2.JOB_STATUS_QUEUED:
            job.ClearField("queue_position")
        if job.parent_id:
            self._roll_up(self.jobs[job.parent_id], job)
        self._notify()

    def _roll_up(self, parent: job_pb2.Job, child: job_pb2.Job) -> None:
        for summary in parent.children:
            if summary.id == child.id:
                summary.status, summary.error_code = child.status, child.error_code
        kids = [self.jobs[s.id] for s in parent.children]
        done = [k for k in kids if k.status in TERMINAL]
        parent.progress = len(done) / len(kids)
        if len(done) == len(kids):
            completed = sum(k.status == job_pb2.JOB_STATUS_COMPLETED for k in kids)
            parent.status = (
                job_pb2.JOB_STATUS_COMPLETED
                if completed == len(kids)
                else job_pb2.JOB_STATUS_FAILED
                if completed == 0
                else job_pb2.JOB_STATUS_PARTIAL
            )
        elif any(
            k.status != job_pb2.JOB_STATUS_QUEUED and k.status != job_pb2.JOB_STATUS_HELD
            for k in kids
        ):
            parent.status = job_pb2.JOB_STATUS_PROCESSING
        self._touch(parent)

    def _notify(self) -> None:
        if self._changed is None:
            return
        changed = self._changed

        async def wake() -> None:
            async with changed:
                changed.notify_all()

        asyncio.get_running_loop().create_task(wake())

    def claim(self, job_id: str, worker_id: str = "gpu-1", pool: str = "default") -> None:
        job = self.jobs[job_id]
        job.status = job_pb2.JOB_STATUS_PROCESSING
        job.attempts += 1
        job.worker_id = worker_id
        job.start_time.CopyFrom(_now())
        seen = self.workers.setdefault(worker_id, WorkerSeen(pool, [job.model], _now()))
        seen.job_ids.add(job_id)
        seen.last_seen.CopyFrom(_now())
        self._touch(job)

    def report(self, job_id: str, progress: float, stage: str = "") -> None:
        job = self.jobs[job_id]
        job.progress, job.stage = progress, stage
        self._touch(job)

    def finish(
        self,
        job_id: str,
        status: int = job_pb2.JOB_STATUS_COMPLETED,
        *,
        result: bytes = b"",
        error_code: str = "",
        error_message: str = "",
    ) -> None:
        job = self.jobs[job_id]
        job.status = status  # type: ignore[assignment]
        job.result, job.result_content_type = result, "text/plain" if result else ""
        job.error_code, job.error_message = error_code, error_message
        if status == job_pb2.JOB_STATUS_COMPLETED:
            job.progress = 1.0
        for seen in self.workers.values():
            seen.job_ids.discard(job_id)
        self._touch(job)

    # -- RPCs

    async def _answer(self, context: Any, work: Callable[[], T], new: bool = False) -> T:
        try:
            if new and self.unimplemented:
                raise Abort(code_pb2.UNIMPLEMENTED, "not implemented yet")
            return work()
        except Abort as abort:
            status = abort.status()
            await context.abort(status.code, status.details, status.trailing_metadata)
            raise AssertionError("unreachable") from None

    async def Submit(self, request: Any, context: Any) -> Any:
        def work() -> Any:
            caller = self._caller(context)
            if request.HasField("group"):
                spec = request.group.children[0]
                job = self.create(
                    caller.tenant,
                    spec.model,
                    labels=dict(spec.labels),
                    children=len(request.group.children),
                    max_parallel=request.group.max_parallel,
                )
            else:
                spec = request.job
                job = self.create(
                    caller.tenant,
                    spec.model,
                    labels=dict(spec.labels),
                    priority=request.priority or job_pb2.PRIORITY_BATCH,
                    pool=spec.pool,
                )
            return job_service_pb2.SubmitResponse(job=job)

        return await self._answer(context, work)

    async def BatchSubmit(self, request: Any, context: Any) -> Any:
        def work() -> Any:
            raise Abort(code_pb2.UNIMPLEMENTED, "the console never batch-submits")

        return await self._answer(context, work)

    async def Get(self, request: Any, context: Any) -> Any:
        return await self._answer(
            context,
            lambda: job_service_pb2.GetResponse(
                job=self._visible(self._caller(context), request.job_id)
            ),
        )

    async def Cancel(self, request: Any, context: Any) -> Any:
        def work() -> Any:
            job = self._visible(self._caller(context), request.job_id)
            if job.status in TERMINAL:
                return job_service_pb2.CancelResponse(job=job, cancelled=False)
            for summary in job.children:
                child = self.jobs[summary.id]
                if child.status in (job_pb2.JOB_STATUS_HELD, job_pb2.JOB_STATUS_QUEUED):
                    child.status = job_pb2.JOB_STATUS_CANCELLED
                    self._touch(child)
            job.status, job.error_message = job_pb2.JOB_STATUS_CANCELLED, request.reason
            self._touch(job)
            return job_service_pb2.CancelResponse(job=job, cancelled=True)

        return await self._answer(context, work)

    async def RetryJob(self, request: Any, context: Any) -> Any:
        def work() -> Any:
            job = self._visible(self._caller(context), request.job_id)
            retryable = {job_pb2.JOB_STATUS_FAILED, job_pb2.JOB_STATUS_CANCELLED}
            if job.kind == job_pb2.JOB_KIND_GROUP:
                retryable.add(job_pb2.JOB_STATUS_PARTIAL)
            if job.status not in retryable or job.kind == job_pb2.JOB_KIND_CHILD:
                raise Abort(
                    code_pb2.FAILED_PRECONDITION, "this job cannot be retried", "JOB_NOT_RETRYABLE"
                )
            for summary in job.children:
                child = self.jobs[summary.id]
                if child.status != job_pb2.JOB_STATUS_COMPLETED:
                    child.status, child.attempts = job_pb2.JOB_STATUS_QUEUED, 0
                    child.error_code = child.error_message = ""
                    summary.status, summary.error_code = child.status, ""
            job.status, job.attempts = job_pb2.JOB_STATUS_QUEUED, 0
            job.error_code = job.error_message = ""
            job.ClearField("end_time")
            self.retried.append(job.id)
            self._touch(job)
            return job_service_pb2.RetryJobResponse(job=job)

        return await self._answer(context, work, new=True)

    async def ListJobs(self, request: Any, context: Any) -> Any:
        def work() -> Any:
            caller = self._caller(context)
            if request.page_size < 0:
                raise Abort(code_pb2.INVALID_ARGUMENT, "must not be negative", "", "page_size")
            matches = parse_filter(request.filter, caller.role == "admin")
            after = _after(request.page_token, request.filter)
            size = min(request.page_size or 50, 1000)
            listed = sorted(
                (
                    j
                    for j in self.jobs.values()
                    if (caller.role == "admin" or j.tenant == caller.tenant)
                    and matches(j)
                    and (after is None or _key(j) < after)
                ),
                key=_key,
                reverse=True,
            )
            page = listed[:size]
            token = _page_token(request.filter, _key(page[-1])) if len(listed) > size else ""
            shown = []
            for job in page:
                copy = job_pb2.Job()
                copy.CopyFrom(job)
                copy.ClearField("result")
                copy.ClearField("children")
                copy.ClearField("queue_position")
                shown.append(copy)
            return job_service_pb2.ListJobsResponse(jobs=shown, next_page_token=token)

        return await self._answer(context, work, new=True)

    def _admin(self, context: Any) -> None:
        if self._caller(context).role != "admin":
            raise Abort(code_pb2.PERMISSION_DENIED, "a client token may not call this method")

    async def ListWorkers(self, request: Any, context: Any) -> Any:
        def work() -> Any:
            self._admin(context)
            workers = [
                job_pb2.Worker(
                    worker_id=worker_id,
                    pool=seen.pool,
                    models=seen.models,
                    last_seen_time=seen.last_seen,
                    job_ids=sorted(seen.job_ids),
                )
                for worker_id, seen in self.workers.items()
            ]
            workers.sort(key=lambda w: w.last_seen_time.ToNanoseconds(), reverse=True)
            return job_service_pb2.ListWorkersResponse(workers=workers)

        return await self._answer(context, work, new=True)

    async def ListQueues(self, request: Any, context: Any) -> Any:
        def work() -> Any:
            self._admin(context)
            stats: dict[tuple[str, int, str], job_pb2.QueueStats] = {}
            for job in self.jobs.values():
                counted = job.kind != job_pb2.JOB_KIND_GROUP
                if not counted or job.status not in (
                    job_pb2.JOB_STATUS_QUEUED,
                    job_pb2.JOB_STATUS_PROCESSING,
                ):
                    continue
                key = (job.model, job.priority, job.pool)
                entry = stats.setdefault(
                    key, job_pb2.QueueStats(model=job.model, priority=job.priority, pool=job.pool)
                )
                if job.status == job_pb2.JOB_STATUS_QUEUED:
                    entry.queued += 1
                    oldest = entry.oldest_queued_time
                    if not entry.HasField("oldest_queued_time") or (
                        job.create_time.ToNanoseconds() < oldest.ToNanoseconds()
                    ):
                        entry.oldest_queued_time.CopyFrom(job.create_time)
                else:
                    entry.processing += 1
            return job_service_pb2.ListQueuesResponse(queues=list(stats.values()))

        return await self._answer(context, work, new=True)

    async def StreamStatus(self, request: Any, context: Any) -> AsyncIterator[Any]:
        job = await self._answer(
            context, lambda: self._visible(self._caller(context), request.job_id)
        )
        if self._changed is None:
            self._changed = asyncio.Condition()
        self.stream_calls += 1
        self.open_streams += 1
        try:
            last = None
            while True:
                snapshot = job_pb2.Job()
                snapshot.CopyFrom(job)
                if snapshot != last:
                    yield job_service_pb2.StreamStatusResponse(job=snapshot)
                    last = snapshot
                if job.status in TERMINAL:
                    return
                async with self._changed:
                    await self._changed.wait()
        finally:
            self.open_streams -= 1


class FakeGatewayThread:
    """A FakeGateway served on 127.0.0.1:<free port> from its own thread and loop."""

    def __init__(
        self, tokens: dict[str, Identity] | None = TOKENS, *, unimplemented: bool = False
    ) -> None:
        self.service = FakeGateway(tokens, unimplemented=unimplemented)
        self.target = ""
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> FakeGatewayThread:
        self._thread.start()
        self.target = self.run(self._start)
        return self

    async def _start(self) -> str:
        self.service._changed = asyncio.Condition()
        server = grpc.aio.server()
        job_service_pb2_grpc.add_JobServiceServicer_to_server(self.service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server
        return f"127.0.0.1:{port}"

    def run(self, work: Callable[[], Any]) -> Any:
        """Run `work()` on the gateway's loop (awaiting it if it is a coroutine)."""

        async def call() -> Any:
            value = work()
            return await value if asyncio.iscoroutine(value) else value

        future: Future[Any] = asyncio.run_coroutine_threadsafe(call(), self._loop)
        return future.result(timeout=30)

    # The driver, from the test's thread.

    def create(self, tenant: str, model: str, **options: Any) -> job_pb2.Job:
        job: job_pb2.Job = self.run(lambda: self.service.create(tenant, model, **options))
        return job

    def create_many(self, count: int, tenant: str, model: str, **options: Any) -> list[str]:
        return [self.create(tenant, model, **options).id for _ in range(count)]

    def claim(self, job_id: str, worker_id: str = "gpu-1") -> None:
        self.run(lambda: self.service.claim(job_id, worker_id))

    def report(self, job_id: str, progress: float, stage: str = "") -> None:
        self.run(lambda: self.service.report(job_id, progress, stage))

    def finish(
        self, job_id: str, status: int = job_pb2.JOB_STATUS_COMPLETED, **fields: Any
    ) -> None:
        self.run(lambda: self.service.finish(job_id, status, **fields))

    def status(self, job_id: str) -> int:
        status: int = self.run(lambda: self.service.jobs[job_id].status)
        return status

    def open_streams(self) -> int:
        count: int = self.run(lambda: self.service.open_streams)
        return count

    def stream_calls(self) -> int:
        count: int = self.run(lambda: self.service.stream_calls)
        return count

    def stop(self) -> None:
        if self._loop.is_closed():
            return
        if self._server is not None:
            server = self._server
            self.run(lambda: server.stop(grace=None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


def ids(jobs: Iterable[job_pb2.Job]) -> list[str]:
    return [job.id for job in jobs]
