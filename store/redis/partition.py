"""The transitions of one partition: one hash tag, one Lua script per state change.

A `Partition` runs the scripts of store/lua/ on the keys of its hash tag
(store/keys.py), on the store's shared `Connection`. Every hot-path call
(submit, get, claim, heartbeat, set_result, cancel) is one EVALSHA round
trip in the steady state; a script that meets a job id or model its call did
not declare asks for it before writing anything and is called again with it
declared (store/redis/calls.py). Each mutating call carries its own operation
key, so redis-py's resend after a broken connection answers the first run's
outcome instead of running the transition twice (docs/store-semantics.md,
"Exactly once per call"). A claim whose caller is gone, or whose outcome is
unknown, is given back in the background.

What spans partitions (where a job goes, claim order across them, caps and
positions over the deployment, merged events) is RedisEngine's
(store/redis/engine.py); a partition knows only its own keys.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any

from store import fields, model, tokens
from store.codes import error_for
from store.errors import FailureHook, StoreError, StoreUnavailable, reporting
from store.fields import copied, ms_to_datetime, to_ms
from store.keys import Declared, Keys
from store.policy import child_key, limits, queue_class
from store.redis.calls import DECLARE_ROUNDS, ScriptCall, declare_needed, keys_needed, texts
from store.redis.codec import (
    claimed_from_reply,
    job_from_snapshot,
    queue_score,
)
from store.redis.connection import Connection, text, translated
from store.redis.hints import Hints
from store.redis.listing import PartitionLister
from store.redis.reads import PartitionReads
from store.redis.scripts import ArgValue

log = logging.getLogger("store.redis")

# A claim whose caller is gone is undone in the background; these bound it.
RELEASE_ATTEMPTS = 5
RELEASE_RETRY_DELAY = 0.2
# close() waits this long for such releases before dropping them (their
# leases then expire after lease_timeout, as after a crash).
RELEASE_GRACE = 2.0
# A claim that stops at an undeclared queue head asks for this many head ids
# per queue, times CLAIM_PEEK_GROWTH for each round in a row that other
# claimers left with nothing, up to CLAIM_PEEK_MAX.
CLAIM_PEEK = 4
CLAIM_PEEK_GROWTH = 4
CLAIM_PEEK_MAX = 64

#: (max_live_per_tenant, max_live_total) as one partition applies them.
Caps = tuple[int, int]


def _check_code(reply: Any, job_id: str = "", max_group_children: int = 0) -> None:
    if isinstance(reply, list) and reply and isinstance(reply[0], int) and reply[0] < 0:
        raise error_for(reply[0], job_id, max_group_children)


class Partition:
    """One hash tag's transitions (see the module docstring)."""

    def __init__(
        self,
        connection: Connection,
        keys: Keys,
        settings: model.StoreSettings,
        hints: Hints,
        new_id: Callable[[], str],
        failures: FailureHook,
    ) -> None:
        self.connection = connection
        self.keys = keys
        self.settings = settings
        self._hints = hints
        # where ids come from (on several partitions: ids of this one)
        self.new_id = new_id
        # Reports the failures of background work (releases of abandoned claims).
        self._failures = failures
        self._background: set[asyncio.Task[None]] = set()
        #: ListJobs' reads of this partition's indexes (and their drain)
        self.lister = PartitionLister(connection, keys)
        #: reads outside the scripts: the audit stream, the gauges' counts
        self.reads = PartitionReads(connection, keys)

    # Calls ---------------------------------------------------------------------
    def _common_args(self) -> list[ArgValue]:
        """ARGV[1..4] of every transition script (includes/common.lua)."""
        return [
            self.keys.notify,
            self.keys.changes,
            self.settings.events_max_length,
            to_ms(self.settings.result_ttl),
        ]

    def _op_key(self) -> str:
        """A fresh operation key: the last KEY of a transition that must run once per call."""
        return self.keys.op(tokens.operation_id())

    async def call_once(self, call: ScriptCall) -> Any:
        """One round of `call` (its reply may ask for keys)."""
        keys, args = call.keys_and_args(self.keys, self._common_args())
        return await self.connection.run(call.name, call.script, keys, args, call.client)

    async def call(self, call: ScriptCall) -> Any:
        """Run `call` until it stops asking for keys (DECLARE_ROUNDS at most)."""
        for _ in range(DECLARE_ROUNDS):
            reply = await self.call_once(call)
            if not keys_needed(reply):
                return reply
            declare_needed(call.script, call.declared, reply[1:])
        raise StoreError(
            f"{call.script}.lua still met undeclared keys after {DECLARE_ROUNDS} calls"
        )

    def _job(self, snapshot: Any) -> model.Job:
        job = job_from_snapshot(snapshot)
        self._hints.learn(job, self.keys)
        return job

    def _claimed(self, entry: Any) -> model.ClaimedJob:
        """claim_jobs.lua's entry; its 5th item (held siblings) is a hint for the end."""
        claimed = claimed_from_reply(entry[:4])
        self._hints.learn(claimed.job, self.keys)
        self._hints.handed_out(claimed.job, entry[0])
        if len(entry) > 4:
            self._hints.add_ids(claimed.job.id, texts(entry[4]))
        return claimed

    # Submit --------------------------------------------------------------------
    async def submit(
        self, request: model.SubmitRequest, caps: Caps | None = None
    ) -> model.SubmitResult:
        """The job's queue position is counted in this partition only; `caps` are the
        settings' unless given (the engine's, with other partitions counted)."""
        caps = caps or self._caps()
        spec, payloads = self._spec(request)
        keys = []
        if request.idempotency_key:
            keys.append(self.keys.idempotency(request.tenant, request.idempotency_key))
        args: list[ArgValue] = [
            request.tenant,
            request.fingerprint(),
            *caps,
            self.settings.max_group_children,
            json.dumps(spec),
            1 if keys else 0,
            *payloads,
        ]
        declared = _spec_declared(spec)
        reply = await self.call(ScriptCall("submit", args, declared, keys, [self._op_key()]))
        _check_code(reply, max_group_children=self.settings.max_group_children)
        return model.SubmitResult(self._submitted(reply[2]), bool(reply[1]))

    def _caps(self) -> Caps:
        return self.settings.max_live_per_tenant, self.settings.max_live_total

    def _submitted(self, snapshot: Any) -> model.Job:
        job = self._job(snapshot)
        if job.status is model.JobStatus.QUEUED and job.kind is not model.JobKind.GROUP:
            self._hints.heard_ready(self.keys.notify, job.model, job.id)
        return job

    async def submit_batch(
        self, requests: Sequence[model.SubmitRequest], caps: Caps | None = None
    ) -> list[model.SubmitResult]:
        caps = caps or self._caps()
        transition_keys = self.keys.transition_keys()
        keys: list[str] = []
        items: list[ArgValue] = []
        payloads: list[ArgValue] = []
        declared = Declared()
        for request in requests:
            spec, item_payloads = self._spec(request)
            item_declared = _spec_declared(spec)
            declared.add(item_declared.ids, item_declared.models, item_declared.raw)
            key_index = 0
            if request.idempotency_key:
                keys.append(self.keys.idempotency(request.tenant, request.idempotency_key))
                key_index = len(transition_keys) + len(keys)  # Lua's 1-based KEYS index
            # Only a keyed item is ever compared, so only it pays for the digest.
            fingerprint = request.fingerprint() if request.idempotency_key else ""
            items.append(
                json.dumps(
                    {**spec, "tenant": request.tenant, "fingerprint": fingerprint, "key": key_index}
                )
            )
            payloads.extend(item_payloads)
        s = self.settings
        args: list[ArgValue] = [*caps, s.max_group_children, len(items), *items, *payloads]
        reply = await self.call(ScriptCall("submit_batch", args, declared, keys, [self._op_key()]))
        if reply[0] < 0:
            error = error_for(reply[0], max_group_children=s.max_group_children)
            raise error.for_item(int(reply[1]))
        return [
            model.SubmitResult(self._submitted(snap), bool(flag))
            for flag, snap in zip(reply[1], reply[2], strict=True)
        ]

    def _job_spec(
        self, spec: model.JobSpec, idempotency_key: str, priority: model.Priority
    ) -> dict[str, Any]:
        effective = limits(spec, self.settings)
        return {
            "id": self.new_id(),
            "model": spec.model,
            "pool": spec.pool,
            # the pass last handed out anywhere, as far as this store knows
            "floor": self._hints.floor(spec.model, priority),
            "fields": {name: fields.encode(name, value) for name, value in copied(spec).items()},
            "max_attempts": effective.max_attempts,
            "queue_timeout": to_ms(effective.queue_timeout),
            "run_timeout": to_ms(effective.run_timeout),
            "idempotency_key": idempotency_key,
        }

    def _spec(self, request: model.SubmitRequest) -> tuple[dict[str, Any], list[bytes]]:
        key = request.idempotency_key
        work = request.work
        # weight 0: fair share off, one FIFO order (includes/common.lua next_score)
        weight = request.weight if self.settings.fair_share else 0
        if isinstance(work, model.GroupSpec):
            children = [
                self._job_spec(child, child_key(key, index), request.priority)
                for index, child in enumerate(work.children)
            ]
            pools = {child.pool for child in work.children}
            parent: dict[str, Any] = {
                "id": self.new_id(),
                "model": work.children[0].model if work.children else "",
                # a group of one pool is bound to it; a mixed one lists as any pool
                "fields": {"pool": pools.pop()} if len(pools) == 1 else {},
                "max_attempts": 0,
                "queue_timeout": 0,
                "run_timeout": 0,
                "idempotency_key": key,
            }
            spec = {
                **parent,
                "kind": model.JobKind.GROUP.value,
                "priority": int(request.priority),
                "weight": weight,
                "max_parallel": max(0, work.max_parallel),
                "jobs": children,
            }
            return _indexed(self.keys, request.tenant, spec), [c.payload for c in work.children]
        single = self._job_spec(work, key, request.priority)
        spec = {
            "kind": model.JobKind.SINGLE.value,
            "id": single["id"],
            "priority": int(request.priority),
            "weight": weight,
            "max_parallel": 0,
            "jobs": [single],
        }
        return _indexed(self.keys, request.tenant, spec), [work.payload]

    # Reads ---------------------------------------------------------------------
    async def get(
        self, tenant: str | None, job_id: str, operation: str = "get"
    ) -> tuple[model.Job, str]:
        """The job (its position counted in this partition) and its queue score."""
        call = ScriptCall(
            "get",
            [job_id, _scope(tenant)],
            self._hints.hinted(job_id),
            operation=operation,
            transition=False,
        )
        reply = await self.call(call)
        _check_code(reply, job_id)
        return self._job(reply[1]), queue_score(reply[1])

    async def payload(self, tenant: str | None, job_id: str) -> bytes:
        keys = [self.keys.job(job_id), self.keys.payload(job_id)]
        reply = await self.connection.run("payload", "payload", keys, [_scope(tenant)])
        _check_code(reply, job_id)
        return bytes(reply[1])

    async def list_children(self, tenant: str | None, job_id: str) -> list[model.Job]:
        call = ScriptCall(
            "children",
            [job_id, _scope(tenant)],
            self._hints.hinted(job_id),
            operation="list_children",
            transition=False,
        )
        reply = await self.call(call)
        _check_code(reply, job_id)
        jobs = [self._job(snap) for snap in reply[1]]
        return sorted(jobs, key=lambda job: job.child_index)

    # Claim ---------------------------------------------------------------------
    async def claim(
        self, worker_id: str, models: list[str], max_jobs: int
    ) -> list[model.ClaimedJob]:
        """Claim up to max_jobs of `models` now (no wait), in claim order."""
        declared = self._hints.claim_declared(self.keys, models)
        entries, needed = await self._claim_round(worker_id, models, max_jobs, declared)
        return await self._claim_rest(worker_id, models, max_jobs, entries, declared, needed)

    async def _claim_rest(
        self,
        worker_id: str,
        models: list[str],
        max_jobs: int,
        claimed: list[model.ClaimedJob],
        declared: Declared,
        needed: list[str],
    ) -> list[model.ClaimedJob]:
        """While a claim stopped at heads it had not declared, claim on with them declared.

        Each job's claim is a complete transition, so the claimed ones stand.
        After DECLARE_ROUNDS rounds in a row that claim nothing, the call ends
        with what it has, maybe nothing: every round met a new head because
        other claimers took the declared ones (or, under fair share, a new job
        queued ahead of them), which is losing the race, not an error; the
        jobs stay queued for the winners and a long poll tries again.
        """
        stalls = 0
        while needed and len(claimed) < max_jobs and stalls < DECLARE_ROUNDS:
            declare_needed("claim", declared, [needed, [], []])
            # heads lost to other claimers: ask for more of them next time
            peek = min(CLAIM_PEEK * CLAIM_PEEK_GROWTH**stalls, CLAIM_PEEK_MAX)
            entries, needed = await self._claim_round(
                worker_id, models, max_jobs - len(claimed), declared, peek
            )
            claimed += entries
            stalls = 0 if entries else stalls + 1
        return claimed

    async def _claim_round(
        self,
        worker_id: str,
        models: list[str],
        max_jobs: int,
        declared: Declared,
        peek: int = CLAIM_PEEK,
    ) -> tuple[list[model.ClaimedJob], list[str]]:
        """One claim.lua call: the jobs claimed and the head ids it stopped for."""
        args: list[ArgValue] = [
            worker_id,
            to_ms(self.settings.lease_timeout),
            max_jobs,
            peek,
            len(models),
            *models,
            *tokens.lease_ids(max_jobs),
        ]
        op_key = self._op_key()
        call = ScriptCall("claim", args, declared, trailing=[op_key])
        entries, needed, hints = await self._shielded_claim(op_key, declared, self.call_once(call))
        claimed = [self._claimed(entry) for entry in entries]
        self._hints.heads_seen(self.keys, models, texts(hints), claimed)
        return claimed, texts(needed)

    async def _shielded_claim(
        self,
        op_key: str,
        declared: Declared,
        script: Coroutine[Any, Any, Any],
        claims: bool = True,
    ) -> Any:
        """Run a claiming script; if its caller is gone or its outcome unknown, undo its leases."""
        call = asyncio.ensure_future(script)
        try:
            # shielded: a caller cancelled now must not drop leases the script made
            return await asyncio.shield(call)
        except (asyncio.CancelledError, StoreUnavailable):
            # cancelled, a timeout, or the connection broke again: the script may have run
            if claims:
                self._in_background(self._undo_claim(op_key, declared, call))
            raise

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _undo_claim(
        self, op_key: str, claim_declared: Declared, call: asyncio.Future[Any]
    ) -> None:
        """Once the claim call settled, give back whatever it leased (nobody got it).

        It runs even while the store closes (close() waits RELEASE_GRACE for it).
        The claim could lease only ids it declared, so the release declares them.
        """
        await asyncio.wait([call])
        declared = Declared(list(claim_declared.ids), list(claim_declared.models))
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                with reporting(self._failures, "release"), translated("release"):
                    released = await self._release_claim(op_key, declared)
            except StoreError as error:
                if attempt + 1 < RELEASE_ATTEMPTS:
                    await asyncio.sleep(RELEASE_RETRY_DELAY)
                    continue
                log.warning(
                    "could not release an abandoned claim (%s); its leases expire after "
                    "the lease timeout",
                    error,
                )
                return
            if released:
                log.info("released %d lease(s) of a claim whose caller was gone", released)
            return

    async def _release_claim(self, op_key: str, declared: Declared) -> int:
        """release.lua of a claim's operation key, on a store that may be closing."""
        call = ScriptCall("release", [1], declared, trailing=[op_key])
        for _ in range(DECLARE_ROUNDS):
            keys, args = call.keys_and_args(self.keys, self._common_args())
            reply = await self.connection.scripts.run(self.connection.rpc, "release", keys, args)
            if not keys_needed(reply):
                return int(reply)
            declare_needed("release", declared, reply[1:])
        raise StoreError(f"release.lua still met undeclared keys after {DECLARE_ROUNDS} calls")

    async def release(self, leases: Sequence[model.ClaimedJob]) -> int:
        args: list[ArgValue] = [0]
        args += [value for item in leases for value in (item.job.id, item.lease_id)]
        declared = self._hints.hinted(*(item.job.id for item in leases))
        return int(await self.call(ScriptCall("release", args, declared)))

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> model.HeartbeatResult:
        args: list[ArgValue] = [
            job_id,
            lease_id,
            repr(progress),
            stage,
            to_ms(self.settings.lease_timeout),
        ]
        reply = await self.call(ScriptCall("heartbeat", args, Declared([job_id])))
        _check_code(reply, job_id)
        return model.HeartbeatResult(ms_to_datetime(reply[1]), bool(reply[2]), text(reply[3]))

    def backoff(self) -> list[ArgValue]:
        s = self.settings
        return [to_ms(s.retry_backoff_base), to_ms(s.retry_backoff_max)]

    async def record_result(
        self, job_id: str, lease_id: str, report: model.ResultReport
    ) -> model.ResultRecorded:
        args: list[ArgValue] = [job_id, lease_id, *_report_args(report), *self.backoff()]
        call = ScriptCall("set_result", args, self._hints.hinted(job_id), trailing=[self._op_key()])
        reply = await self.call(call)
        _check_code(reply, job_id)
        return model.ResultRecorded(self._job(reply[1]), applied=reply[2] == 1)

    async def report_and_claim(
        self, worker_id: str, models: list[str], results: Sequence[model.LeaseResult], max_jobs: int
    ) -> model.ReportedAndClaimed:
        """The results and a claim of up to max_jobs (0: none) in one script."""
        declared = self._hints.claim_declared(
            self.keys, models, self._hints.hinted(*(job_id for job_id, _, _ in results))
        )
        claim_op = self._op_key()
        args: list[ArgValue] = [
            worker_id,
            to_ms(self.settings.lease_timeout),
            max_jobs,
            len(models),
            len(results),
            *self.backoff(),
        ]
        for job_id, lease_id, report in results:
            args += [job_id, lease_id, *_report_args(report)]
        args += [*models, *tokens.lease_ids(max_jobs)]
        call = ScriptCall("report_and_claim", args, declared, trailing=[self._op_key(), claim_op])
        reply = await self._shielded_claim(claim_op, declared, self.call(call), max_jobs > 0)
        answers = [
            self._report_answer(job_id, code, snapshot)
            for (job_id, _, _), (code, snapshot) in zip(results, reply[0], strict=True)
        ]
        claimed = [self._claimed(entry) for entry in reply[1]]
        if models:
            self._hints.heads_seen(self.keys, models, texts(reply[3]), claimed)
        needed = texts(reply[2])
        claimed = await self._claim_rest(worker_id, models, max_jobs, claimed, declared, needed)
        return model.ReportedAndClaimed(answers, claimed)

    def _report_answer(self, job_id: str, code: int, snapshot: Any) -> model.ReportAnswer:
        if code < 0:
            return model.ReportAnswer(job_id, refused=error_for(code, job_id))
        return model.ReportAnswer(
            job_id, model.ResultRecorded(self._job(snapshot), applied=code == 1)
        )

    async def cancel(
        self, tenant: str | None, job_id: str, reason: str = "", actor: str = ""
    ) -> model.CancelResult:
        call = ScriptCall(
            "cancel",
            [job_id, _scope(tenant), reason, actor],
            self._hints.hinted(job_id),
            trailing=[self._op_key()],
        )
        reply = await self.call(call)
        _check_code(reply, job_id)
        return model.CancelResult(job=self._job(reply[1]), cancelled=reply[0] == 1)

    async def retry_job(
        self, tenant: str | None, job_id: str, actor: str, caps: Caps | None = None
    ) -> model.Job:
        """retry_job.lua; `caps` as submit's (the engine's, other partitions counted)."""
        args: list[ArgValue] = [job_id, _scope(tenant), actor, *(caps or self._caps())]
        call = ScriptCall("retry_job", args, self._hints.hinted(job_id), trailing=[self._op_key()])
        reply = await self.call(call)
        if reply[0] < 0:
            raise error_for(reply[0], job_id, why=text(reply[1]) if len(reply) > 1 else "")
        return self._job(reply[1])

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        reply = await self.connection.run(
            "acquire_leadership",
            "acquire_leadership",
            [self.keys.leader],
            [holder, to_ms(ttl)],
            client=self.connection.control,
        )
        return bool(reply)

    async def drain(self) -> None:
        """Wait (up to RELEASE_GRACE) for the releases of abandoned claims."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=RELEASE_GRACE)

    @property
    def releasing(self) -> int:
        """Releases of abandoned claims still running (tests)."""
        return len(self._background)


def _scope(tenant: str | None) -> str:
    """A tenant as the scripts take it: '' for any tenant (no tenant is named '')."""
    return "" if tenant is None else tenant


def _report_args(report: model.ResultReport) -> list[ArgValue]:
    return [
        report.status.value,
        report.result,
        report.result_content_type,
        report.error_code,
        report.error_message,
        1 if report.retryable else 0,
    ]


def _spec_declared(spec: dict[str, Any]) -> Declared:
    """A submit's declaration: every job id it creates (the root, the
    children), every model they queue on and their (tenant, model) index runs."""
    jobs = spec["jobs"]
    classes = [c for job in jobs for c in (job["model"], queue_class(job["model"], job["pool"]))]
    runs = [job["model_index"] for job in (spec, *jobs) if "model_index" in job]
    return Declared([spec["id"], *(job["id"] for job in jobs)], classes, runs)


def _indexed(keys: Keys, tenant: str, spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` with each job's (tenant, model) index run named (submit writes it,
    includes/index.lua), and a group's child ids ascending with their index, so
    its children list is in ListJobs' key order (store/redis/listing.py)."""
    jobs = spec["jobs"]
    if spec["kind"] == model.JobKind.GROUP.value:
        spec["model_index"] = keys.index_model(tenant, spec["model"])
        for job, job_id in zip(jobs, sorted(job["id"] for job in jobs), strict=True):
            job["id"] = job_id
    for job in jobs:
        job["model_index"] = keys.index_model(tenant, job["model"])
    return spec
