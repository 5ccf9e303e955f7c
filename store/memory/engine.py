"""LocalEngine: the embedded store's transitions in memory (`jobgate serve` without Redis).

Atomicity: every transition is plain synchronous code with no `await`
inside, so on the one event loop that owns the store each transition runs
whole; waiters (claim long-polls, watches, events) sleep on listeners that
transitions wake (store/memory/waiters.py), routed like RedisEngine's
messages: a change wakes the watchers of the jobs it touched (and of jobs
queued for the same model, whose positions move) and the claims of the
models that got a claimable job, never every waiter. The state and the
steps transitions are made of live in store/memory/state.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta

from store import model, policy
from store.errors import (
    FailureHook,
    IdempotencyKeyReused,
    JobCancelled,
    JobNotFound,
    LeaseLost,
    StoreUnavailable,
    ignore_failure,
)
from store.journal import Journal, Loaded
from store.memory import durable, submits
from store.memory.changes import IN_MEMORY, Changes
from store.memory.fleet import LocalFleet
from store.memory.operators import Operators
from store.memory.record import Record, outcome_of, same_outcome
from store.memory.state import State, dt, event_number
from store.memory.waiters import LocalListener, Waiters
from store.policy import Verdict

log = logging.getLogger(__name__)
#: Seconds between attempts to rebuild memory from the data directory after a failed commit.
RELOAD_RETRY = 1.0

# In-process wake-ups are never lost: a wait needs no safety re-check.
_NO_RECHECK = 3600.0


class LocalEngine(Operators):
    """The Store's transitions in process memory; with a `journal`, also in its directory.

    Without one, state dies with the process. With one (store/memory/durable.py)
    `open` loads the state from the file, every change is marked in the journal
    as it happens, and `settled` (which the front awaits before any answer
    leaves) waits for the commit that holds it.
    """

    def __init__(
        self,
        settings: model.StoreSettings,
        clock: Callable[[], float] = time.time,
        journal: Journal[State] | None = None,
    ) -> None:
        self.settings = settings
        self.on_failure: FailureHook = ignore_failure
        self._clock = clock
        self._journal = journal
        self._reloading: asyncio.Task[None] | None = None
        # While a start loads the finished jobs behind the open ones: resolved once
        # they are in (or failed: StoreUnavailable); None when nothing is loading.
        self._finished: asyncio.Future[None] | None = None
        self._backfill: asyncio.Task[None] | None = None
        self.state = State(settings, clock, self._changes())
        self.fleet = LocalFleet(self.state, self._check_open)
        self._closed = False
        self._leader: tuple[str, float] | None = None
        # Replaced on every wake-up: event readers hold the old one, which gets set.
        self._changed = asyncio.Event()
        self._waiters = Waiters()
        self._woken_through = 1  # events numbered below this have woken their waiters
        self._revived: list[str] = []  # durable.revive_kept_children, between two calls
        # no connection pool to spare: woken re-reads need no slot
        self.waiter_reads: contextlib.AbstractAsyncContextManager[object] = _NoSlot()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def journal(self) -> Journal[State] | None:
        """Where the state is kept on disk; None in memory."""
        return self._journal

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        self._closed = False
        if self._journal is not None:
            self._restored(await self._journal.open(self._restore))
            self._journal.on_diverged = self._reload
            self._finished = asyncio.get_running_loop().create_future()
            self._backfill = asyncio.create_task(self._load_finished(), name="jobgate-backfill")

    async def close(self) -> None:
        self._closed = True
        if self._reloading is not None:  # (a reload retrying while the disk is full)
            self._reloading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloading
        await self._stop_backfill(StoreUnavailable("the store is closed"))
        self._wake()
        if self._journal is not None:
            await self._journal.close()

    async def settled(self, soon: bool = False) -> None:
        """Return once every change made so far is durable (at once in memory)."""
        if self._journal is not None:
            await self._journal.settled(soon)

    # -- the journal (store/memory/durable.py) ----------------------------------

    def _changes(self) -> Changes:
        return IN_MEMORY if self._journal is None else durable.JournalChanges(self._journal)

    def _restore(self, loaded: Loaded) -> State:
        """On the journal's thread; `_restored` follows on the loop."""
        self._revived = durable.revive_kept_children(loaded.records)
        return durable.restore(self.settings, self._clock, loaded, self._changes())

    def _restored(self, state: State) -> None:
        assert self._journal is not None
        self.state = state
        self.fleet.rebind(state)
        self._journal.attach(state.jobs, durable.MetaOf(state))
        self._woken_through = state.next_event
        for job_id in self._revived:  # written again without the expiry they lost
            state.changes.touched(state.jobs[job_id])
        self._revived = []

    def _reload(self) -> None:
        """A commit failed: memory went past the file. Rebuild it from the file."""
        if self._closed or self._reloading is not None:
            return
        self._reloading = asyncio.create_task(self._reload_now())

    async def _reload_now(self) -> None:
        """Rebuild memory from the file, again every RELOAD_RETRY seconds while that
        fails (the disk still full, say): calls answer UNAVAILABLE meanwhile."""
        assert self._journal is not None
        try:
            await self._stop_backfill(None)  # the reload reads every record
            while True:
                try:
                    self._restored(await self._journal.reload(self._restore))
                    break
                except Exception as error:
                    if self._closed:
                        return
                    log.error("the data directory cannot be reloaded (%s); again in %s s",
                              error, RELOAD_RETRY)  # fmt: skip
                    await asyncio.sleep(RELOAD_RETRY)
            self._journal.resume()
        finally:
            self._reloading = None
        self._waiters.wake_all()  # claims and watches read the rebuilt state

    async def fully_loaded(self) -> None:
        """Return once a start has loaded every record, the finished ones too."""
        await self._finished_loaded(every=True)

    async def _load_finished(self) -> None:
        """The finished jobs, merged behind the open ones a start loaded."""
        assert self._journal is not None and self._finished is not None
        backfill, finished = durable.Backfill(self.state), self._finished
        started = time.monotonic()
        try:
            count = await self._journal.load_closed(backfill.add)
        except Exception as error:  # a merge's bug too: waiters must not wait forever
            failure = (
                error
                if isinstance(error, StoreUnavailable)
                else StoreUnavailable(f"cannot load the finished jobs: {error!r}")
            )
            log.error("%s; calls that need a finished job answer UNAVAILABLE", failure)
            finished.set_exception(failure)
            finished.exception()  # retrieved: there may be no waiter
            return
        finally:
            backfill.done()  # what was merged expires at its TTL, even after a failure
        log.info("loaded %d finished jobs in %.1f s", count, time.monotonic() - started)
        self._finished = None
        finished.set_result(None)

    async def _stop_backfill(self, failure: StoreUnavailable | None) -> None:
        """Stop loading finished jobs; their waiters get `failure` (None: go on)."""
        task, finished = self._backfill, self._finished
        self._backfill = self._finished = None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if finished is not None and not finished.done():
            if failure is None:
                finished.set_result(None)
            else:
                finished.set_exception(failure)
                finished.exception()

    async def _finished_loaded(
        self,
        job_ids: Iterable[str] = (),
        keys: Iterable[tuple[str, str]] = (),
        every: bool = False,
    ) -> None:
        """While a start still loads finished jobs, wait for them unless the call
        needs none: every job it names is in memory with its children (a
        finished group's may come in a later chunk than the parent), every
        idempotency key it brings is known and its job so (an unknown key may
        be a finished job's). `every`: it reads them all (ListJobs). StoreUnavailable if they
        cannot be loaded."""
        finished = self._finished
        if finished is None:
            return
        if (
            not every
            and all(self._in_memory(job_id) for job_id in job_ids)
            and all(self._in_memory(self.state.keys.get(key, "")) for key in keys)
        ):
            return
        await asyncio.shield(finished)

    def _in_memory(self, job_id: str) -> bool:
        jobs = self.state.jobs
        record = jobs.get(job_id)
        return record is not None and all(child in jobs for child in record.children)

    async def ping(self) -> None:
        self._check_open()

    # -- tenant-facing -------------------------------------------------------

    async def submit(self, request: model.SubmitRequest) -> model.SubmitResult:
        key = request.idempotency_key
        if key:
            await self._finished_loaded(keys=[(request.tenant, key)])
        self._check_open()
        now = self.state.clock()
        # Only a keyed request is ever compared, so only it pays for the digest.
        fingerprint = request.fingerprint() if key else ""
        if key:
            existing = self.state.keyed(request.tenant, key, now)
            if existing is not None:
                if existing.fingerprint != fingerprint:
                    raise IdempotencyKeyReused(
                        f"idempotency key {key!r} was used for a different request",
                        job_id=existing.id,
                    )
                return model.SubmitResult(self.state.snapshot(existing), reused=True)
        submits.admit(self.state, request)
        self._check_room([request])
        record = submits.create(self.state, request, fingerprint, now)
        self._wake()
        return model.SubmitResult(self.state.snapshot(record), reused=False)

    async def submit_batch(
        self, requests: Sequence[model.SubmitRequest]
    ) -> list[model.SubmitResult]:
        keys = [(each.tenant, each.idempotency_key) for each in requests if each.idempotency_key]
        await self._finished_loaded(keys=keys)
        self._check_open()
        now = self.state.clock()
        plan = submits.plan_batch(self.state, requests, now)  # every check first: all or nothing
        created = [
            request for request, (_, made) in zip(requests, plan, strict=True) if made is None
        ]
        self._check_room(created)
        records: list[Record] = []
        for request, (fingerprint, source) in zip(requests, plan, strict=True):
            if isinstance(source, int):
                records.append(records[source])  # an earlier item of this batch made it
            elif source is not None:
                records.append(source)
            else:
                records.append(submits.create(self.state, request, fingerprint, now))
        if any(source is None for _, source in plan):
            self._wake()
        return [
            model.SubmitResult(self.state.snapshot(record), reused=source is not None)
            for record, (_, source) in zip(records, plan, strict=True)
        ]

    async def get(self, tenant: str | None, job_id: str, operation: str = "get") -> model.Job:
        await self._finished_loaded([job_id])
        self._check_open()
        return self.state.snapshot(self.state.visible_record(tenant, job_id))

    async def payload(self, tenant: str | None, job_id: str) -> bytes:
        await self._finished_loaded([job_id])
        self._check_open()
        return self.state.changes.payload(self.state.visible_record(tenant, job_id))

    async def list_children(self, tenant: str | None, job_id: str) -> list[model.Job]:
        await self._finished_loaded([job_id])
        self._check_open()
        record = self.state.visible_record(tenant, job_id)
        return [self.state.snapshot(self.state.jobs[child]) for child in record.children]

    async def cancel(
        self, tenant: str | None, job_id: str, reason: str = "", actor: str = ""
    ) -> model.CancelResult:
        await self._finished_loaded([job_id])
        self._check_open()
        now = self.state.clock()
        record = self.state.visible_record(tenant, job_id)
        if record.status in model.TERMINAL_STATUSES:
            return model.CancelResult(self.state.snapshot(record), cancelled=False)
        with self.state.acting(actor):
            if record.kind is model.JobKind.GROUP:
                self.state.cancel_group(record, reason, now)
            else:
                self.state.cancel_job(record, reason, now)
        self._wake()
        return model.CancelResult(self.state.snapshot(record), cancelled=True)

    # -- worker-facing -------------------------------------------------------

    def waiting_claims(self, model: str) -> int:
        """Claims blocked waiting for `model` (tests, debugging), as RedisStore's."""
        return self._waiters.count(f"r {model}")

    async def release(self, leases: Sequence[model.ClaimedJob]) -> int:
        await self._finished_loaded([item.job.id for item in leases])
        self._check_open()
        now = self.state.clock()
        released = 0
        for item in leases:
            record = self.state.fresh(item.job.id, now)
            if record is None or record.status is not model.JobStatus.PROCESSING:
                continue
            if record.lease_id != item.lease_id:
                continue
            self.state.release(record, now)
            released += 1
        if released:
            self._wake()
        return released

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> model.HeartbeatResult:
        await self._finished_loaded([job_id])
        self._check_open()
        now = self.state.clock()
        record = self.state.record_of(job_id)
        verdict = policy.heartbeat_verdict(
            record.status, bool(lease_id) and record.lease_id == lease_id, record.cancel_requested
        )
        if verdict is Verdict.CANCEL_REQUESTED:
            return model.HeartbeatResult(dt(record.lease_deadline), True, record.worker_id)
        if verdict is not Verdict.APPLY:
            raise LeaseLost(
                f"lease {lease_id} is not the live lease of job {job_id}", job_id=job_id
            )
        record.lease_deadline = now + self.settings.lease_timeout.total_seconds()
        self.state.push(self.state.leases, record.lease_deadline, record, lease_id)
        self.state.changes.touched(record, lazy=True)  # DESIGN: heartbeats may persist late
        stage = stage or record.stage
        if (progress, stage) != (record.progress, record.stage):
            record.progress, record.stage = progress, stage
            record.update_time = now
            self._wake(record.id)  # progress changes are not events
        return model.HeartbeatResult(dt(record.lease_deadline), False, record.worker_id)

    async def record_result(
        self, job_id: str, lease_id: str, report: model.ResultReport
    ) -> model.ResultRecorded:
        await self._finished_loaded([job_id])
        self._check_open()
        now = self.state.clock()
        record = self.state.record_of(job_id)
        outcome = outcome_of(report)
        verdict = policy.result_verdict(
            record.status,
            bool(lease_id) and record.lease_id == lease_id,
            record.cancel_requested,
            same_outcome(record.outcome, outcome, report.result),
        )
        if verdict is Verdict.JOB_CANCELLED:
            raise JobCancelled(f"job {job_id} was cancelled", job_id=job_id)
        if verdict is Verdict.REPEAT:
            return model.ResultRecorded(self.state.snapshot(record), applied=False)
        if verdict is Verdict.LEASE_LOST:
            raise LeaseLost(
                f"lease {lease_id} is not the live lease of job {job_id}", job_id=job_id
            )
        record.outcome = outcome
        if report.status is model.JobStatus.COMPLETED:
            record.result = report.result
            record.result_content_type = report.result_content_type
            record.error_code = record.error_message = ""
            record.progress = 1.0
            self.state.end(record, model.JobStatus.COMPLETED, now)
        elif report.retryable:
            code, message = report.error_code, report.error_message
            self.state.retry_or_exhaust(record, code, message, now, backoff=True)
        else:
            record.error_code, record.error_message = report.error_code, report.error_message
            self.state.end(record, model.JobStatus.FAILED, now)
        self._wake()
        return model.ResultRecorded(self.state.snapshot(record), applied=True)

    async def report_and_claim(
        self, worker_id: str, models: list[str], results: Sequence[model.LeaseResult], max_jobs: int
    ) -> model.ReportedAndClaimed:
        await self._finished_loaded([job_id for job_id, _, _ in results])
        # One step: nothing below suspends (record_result's wait above is over),
        # so no other call runs in between.
        answers = []
        for job_id, lease_id, report in results:
            try:
                recorded = await self.record_result(job_id, lease_id, report)
            except (LeaseLost, JobCancelled, JobNotFound) as refused:
                answers.append(model.ReportAnswer(job_id, refused=refused))
            else:
                answers.append(model.ReportAnswer(job_id, recorded=recorded))
        claimed = self._claim(worker_id, models, max_jobs) if max_jobs > 0 else []
        return model.ReportedAndClaimed(answers, claimed)

    # -- operations ----------------------------------------------------------

    async def recover(self) -> list[model.JobEvent]:
        self._check_open()
        now = self.state.clock()
        self.state.captured = []
        try:
            self.state.recover_run_timeouts(now)
            self.state.recover_leases(now)
            promoted = self.state.recover_retries(now)
            self.state.recover_queue_timeouts(now)
            self.state.recover_expiries(now)
            events = self.state.captured
        finally:
            self.state.captured = None
        if events or promoted:
            self._wake()
        return events

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        self._check_open()
        now = self.state.clock()
        if self._leader is not None and self._leader[0] != holder and self._leader[1] > now:
            return False
        self._leader = (holder, now + ttl.total_seconds())
        return True

    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[model.JobEvent]:
        self._check_open()
        start = event_number(after)
        deadline = time.monotonic() + (block.total_seconds() if block else 0.0)
        while True:
            changed = self._changed
            found = self.state.events_after(start, count)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0 or self._closed:
                return found
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return []

    async def newest_event_id(self) -> str:
        self._check_open()
        return self.state.events[-1].id if self.state.events else "0"

    async def ready_counts(self) -> dict[tuple[str, model.Priority, str], int]:
        self._check_open()
        return {key: len(queue) for key, queue in self.state.queues.items()}

    async def in_flight(self) -> dict[str, int]:
        self._check_open()
        flights: dict[str, int] = {}
        for job_class, count in self.state.in_flight.items():
            model_name = policy.class_parts(job_class)[0]
            flights[model_name] = flights.get(model_name, 0) + count
        return flights

    # -- the fleet (store/memory/fleet.py) -------------------------------------
    async def record_workers(self, seen: Sequence[model.WorkerSighting]) -> None:
        self.fleet.record(seen)

    async def list_workers(self) -> list[model.WorkerInfo]:
        return self.fleet.workers()

    async def queue_stats(self) -> list[model.QueueStats]:  # pools: the lead replaces this body
        return self.fleet.queue_stats()

    async def demand(self, model: str, pool: str | None) -> int:  # pools: the lead replaces it
        return self.fleet.demand(model, pool)

    # -- submit --------------------------------------------------------------

    # -- claim ---------------------------------------------------------------

    async def claim_now(
        self, worker_id: str, models: list[str], max_jobs: int
    ) -> list[model.ClaimedJob]:
        self._check_open()
        return self._claim(worker_id, models, max_jobs)

    def _claim(self, worker_id: str, models: list[str], max_jobs: int) -> list[model.ClaimedJob]:
        now = self.state.clock()
        claimed: list[model.ClaimedJob] = []
        while len(claimed) < max_jobs:
            record = self.state.next_ready(models)
            if record is None:
                break
            claimed.append(self.state.lease(record, worker_id, now))
        if claimed:
            self._wake()
        return claimed

    async def read_for_watch(self, tenant: str | None, job_id: str) -> model.Job:
        return await self.get(tenant, job_id, "watch")

    # -- waiting -------------------------------------------------------------

    @contextlib.contextmanager
    def listen(self, topics: Iterable[str], wake_one: bool = False) -> Iterator[LocalListener]:
        self._check_open()
        with self._waiters.listen(topics) as listener:
            yield listener

    def recheck(self) -> float:
        return _NO_RECHECK

    def settle_time(self, model: str) -> float:
        return policy.POSITION_SETTLE

    # -- plumbing ------------------------------------------------------------

    def _check_open(self) -> None:
        """A closed store, or a journal being reloaded after a failed commit."""
        if self._closed:
            raise StoreUnavailable("the store is closed")
        if self._journal is not None:
            self._journal.check()

    def _check_room(self, created: Sequence[model.SubmitRequest]) -> None:
        """QueueFull when the journal's disk has no room for these jobs (past its reserve)."""
        if self._journal is None or not created:
            return
        self._journal.check_room(durable.bytes_needed(created))

    def _wake(self, *job_ids: str) -> None:
        """Wake event readers, and the waiters of what changed since the last wake-up."""
        state = self.state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self._closed or self._woken_through < state.first_event:
            self._waiters.wake_all()  # closing, or events trimmed before they woke anyone
        else:
            self._waiters.wake(self._changed_topics(job_ids))
        self._woken_through = state.next_event
        state.claimable_models.clear()

    def _changed_topics(self, job_ids: Iterable[str]) -> set[str]:
        state = self.state
        topics = {f"j {job_id}" for job_id in job_ids}
        for event in state.events[self._woken_through - state.first_event :]:
            topics.add(f"j {event.job_id}")
            if event.parent_job_id:
                topics.add(f"j {event.parent_job_id}")  # its progress and children moved
            topics.add(f"q {event.model}")
        for job_class in state.claimable_models:
            topics.update((f"r {job_class}", f"q {policy.class_parts(job_class)[0]}"))
        return topics


class _NoSlot(contextlib.AbstractAsyncContextManager[object]):
    async def __aexit__(self, *exc: object) -> None:
        return None
