"""The `Store` protocol: every job state transition, each one atomic.

Both `LocalStore` (memory.py) and `RedisStore` (redis_store.py) implement it
and are held to it by one contract suite (tests/store/test_contract.py).

Semantics every implementation keeps (see ../shared/DESIGN.md, "Semantics"):

* Tenancy: every tenant-facing call takes the caller's tenant; another
  tenant's job raises `JobNotFound`, exactly like an unknown id. A tenant
  of None means any tenant (an admin caller: `Caller.tenant_scope`). Worker-facing
  calls (claim, heartbeat, set_result) serve every tenant: the GPU fleet is
  shared, and the lease id is the worker's proof of ownership.
* Idempotency: same tenant + key + `SubmitRequest.fingerprint()` returns the
  existing job with `reused=True` (no caps applied); same key, other
  fingerprint raises `IdempotencyKeyReused`; an empty key never deduplicates.
  The key expires with its job.
* Admission (checked after idempotency): children per group over
  `max_group_children` raises `InvalidRequest("group.children", ...)`; live
  (held+queued+processing) jobs of the tenant over `max_live_per_tenant`
  raises `QuotaExceeded`; live jobs in total over `max_live_total` raises
  `QueueFull`. A group counts as its children (the parent is not counted).
* Claim: highest priority first, FIFO (submit order) inside a priority, only
  the given models. Each claimed job becomes PROCESSING with attempts+1, the
  worker id, a fresh lease id (fencing token), and a lease deadline from the
  store's clock. At most one live lease per job.
* Release: a lease whose claimer never learned of it (its deadline passed,
  it was cancelled, the server drains) is given back at once: the job is
  QUEUED again at its original place with attempts restored (a child of a
  cancelled group ends CANCELLED instead); the lease id is dead from then on.
  A lease that is no longer the job's live one is skipped.
* Exactly once per call: a transition runs once per call even when the
  backend's answer is lost and the call is resent (RedisStore: an operation
  key per call); a claim cancelled while the backend runs it releases what
  it leased.
* Heartbeat / set_result with a lease id that is not the job's current lease
  raise `LeaseLost` and change nothing. A set_result repeated with the same
  lease id and outcome returns the stored job unchanged. set_result on a job
  cancelled while processing raises `JobCancelled`; its heartbeat answers
  `cancel_requested=True` (not LeaseLost).
* Recovery (`recover`): an expired lease requeues the job at its original
  place (same sequence number) when attempts < max_attempts, else ends it
  FAILED with error_code ATTEMPTS_EXHAUSTED. A retryable failure, and an
  attempt PROCESSING past its run_timeout (error_code RUN_TIMEOUT, even while
  heartbeating), are retried the same way after an exponential backoff
  (`retry_backoff_base * 2**(attempts-1)`, capped): the job is QUEUED but not
  claimable until the backoff ends. A job QUEUED longer than its queue_timeout
  (counted from when it last became QUEUED) ends FAILED with QUEUE_TIMEOUT.
  Each `recover` call costs O(items due), never O(jobs in flight).
* Cancel: HELD/QUEUED -> CANCELLED at once; PROCESSING -> CANCELLED at once
  with cancel_requested=True; a group parent -> CANCELLED, its held/queued
  children CANCELLED, processing children run on and keep their results. A
  terminal job returns `cancelled=False`. error_code CANCELLED, error_message
  the reason.
* Groups: children are created HELD; at most `max_parallel` (0 = no cap) are
  QUEUED/PROCESSING; whenever a child ends, the next HELD child (lowest index)
  is released in the same atomic step. The parent is QUEUED until a child
  starts, then PROCESSING with progress = terminal children / total, and when
  every child is terminal it ends exactly once: COMPLETED (all completed),
  FAILED (none completed) or PARTIAL. A child's idempotency_key is
  "<parent key>#<index>". Children share the parent's priority.
* TTL: live jobs never expire; a job reaching a terminal status gets
  `result_ttl` on its record, payload, result and idempotency key; a group's
  children get the parent's expiry. A claim or recovery that meets an id whose
  record is gone drops the id and never recreates a blank record.
* Audit: every status transition appends a `JobEvent` in the same atomic step;
  the stream is capped near `events_max_length`. The events of an admin's
  cancel or retry_job carry its `actor` ("admin:<tenant>").
* ListJobs (list_jobs): newest first (create_time, then id, descending),
  keyset pages from a `ListCursor`; a job that exists and matches for a
  whole walk is listed exactly once, every listed job matched when its page
  was read. Indexes are kept by the transitions (store/listing.py); a page
  costs O(page_size x log N) for no filter and for status, kind, model and
  parent_id; other terms examine at most 10 x page_size jobs per call (a
  short page with a cursor). Listed jobs carry no result, children or
  queue_position. Jobs past their result_ttl are never listed.
* RetryJob (retry_job): a FAILED or CANCELLED single job back to QUEUED at
  the back of its queue, a FAILED, PARTIAL or CANCELLED group's unfinished
  children back to HELD (store/memory/redrive.py says the rest); else
  `JobNotRetryable`. The tenant's live caps apply.
* Failures of the backing store raise `StoreUnavailable`, never an empty
  answer, and are reported to `on_failure` under the method's name
  (`record_result` as "set_result").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Protocol

from store import model
from store.errors import FailureHook
from store.poll import Listener


class Store(Protocol):
    """Durable job state. Every method is one atomic transition or a read."""

    settings: model.StoreSettings
    # Called with the operation's name ("get", "set_result", "watch"...) each
    # time the backend fails (`store.errors.is_failure`): the servers set it
    # to count jobgate_store_errors_total. Defaults to ignoring.
    on_failure: FailureHook

    async def open(self) -> None:
        """Connect and check the backend (RedisStore refuses an evicting policy)."""

    async def close(self) -> None:
        """Release connections; wakes pending claim/watch waiters, which return."""

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the backend answers."""

    async def submit(self, request: model.SubmitRequest) -> model.SubmitResult:
        """Create a job or a group (with its children), or return the keyed original."""

    async def submit_batch(
        self, requests: Sequence[model.SubmitRequest]
    ) -> list[model.SubmitResult]:
        """Submit every request, all or nothing, in one atomic step (BatchSubmit).

        Each item keeps submit's rules, applied in order (an item may reuse
        the job an earlier item of the same batch made). If any item is
        refused, nothing is created and its error is raised with `item` set
        to its index.
        """

    async def get(self, tenant: str | None, job_id: str) -> model.Job:
        """The job's snapshot, with queue_position while QUEUED and a group's children."""

    async def payload(self, tenant: str | None, job_id: str) -> bytes:
        """The job's input bytes (kept apart from the record).

        No production caller (claim hands the payload to the worker): the
        contract suite needs it to show the payload is stored byte for byte
        and expires with its job, which no other read shows.
        """

    async def list_children(self, tenant: str | None, job_id: str) -> list[model.Job]:
        """A group's children in index order (empty for other kinds)."""

    async def list_jobs(
        self,
        tenant: str | None,
        query: model.JobFilter,
        after: model.ListCursor | None,
        page_size: int,
    ) -> model.JobPage:
        """One ListJobs page of `tenant`'s jobs (None: every tenant's) matching
        `query`, newest first, after `after`; `next` is None on the last page."""

    async def retry_job(self, tenant: str | None, job_id: str, actor: str = "") -> model.Job:
        """RetryJob: the job (or group) back to work in one atomic step; its snapshot."""

    async def claim(
        self,
        worker_id: str,
        models: Sequence[str],
        max_jobs: int = 1,
        wait: timedelta = timedelta(0),
        pool: str = "",
    ) -> list[model.ClaimedJob]:
        """Claim up to max_jobs in claim order, waiting up to `wait` for the first one.

        A claim for `pool` takes only jobs bound to that pool or to any pool
        ("" claims only any-pool jobs): placement holds by construction, as
        the claim reads only those queues (store.policy.claim_classes).

        Returns as soon as at least one job was claimed; an empty list means
        nothing came within `wait`. A job submitted while the caller waits
        wakes it at once (pushed, also across replicas on Redis).
        """

    async def release(self, leases: Sequence[model.ClaimedJob]) -> int:
        """Give back leases nobody received: QUEUED at the original place, attempts restored.

        Returns how many were released; a lease no longer live is skipped.
        """

    async def heartbeat(
        self, job_id: str, lease_id: str, progress: float, stage: str
    ) -> model.HeartbeatResult:
        """Extend the lease by lease_timeout; record progress and stage (empty keeps it)."""

    async def set_result(
        self,
        job_id: str,
        lease_id: str,
        status: model.JobStatus,
        result: bytes = b"",
        result_content_type: str = "",
        error_code: str = "",
        error_message: str = "",
        retryable: bool = False,
    ) -> model.Job:
        """record_result spelled inline, answering the job only.

        No production caller (WorkerService calls record_result): tests and
        tools use it to end attempts in one line. Stores that subclass Store
        inherit it.
        """
        report = model.ResultReport(
            status, result, result_content_type, error_code, error_message, retryable
        )
        return (await self.record_result(job_id, lease_id, report)).job

    async def record_result(
        self, job_id: str, lease_id: str, report: model.ResultReport
    ) -> model.ResultRecorded:
        """End the attempt: COMPLETED, FAILED, or FAILED+retryable (requeue after backoff).

        `applied` is False for a repeat (same lease and outcome) that returned
        the stored job unchanged, so callers count each outcome once.
        """

    async def report_and_claim(
        self,
        worker_id: str,
        models: Sequence[str],
        results: Sequence[model.LeaseResult],
        max_jobs: int,
        pool: str = "",
        settle: bool = True,
    ) -> model.ReportedAndClaimed:
        """End each (job_id, lease_id, report) as record_result would, then claim.

        One atomic step (one script on Redis): a result refused with
        LeaseLost, JobCancelled or JobNotFound is answered in its ReportAnswer
        and spares the others; then up to max_jobs jobs (0: none) are claimed
        as claim() with no wait would. The daemon's fast path.

        `settle=False`: when it claims nothing it returns before its results
        are durable, and the caller awaits `settled()` before it answers (the
        worker server long-polls first: the commit of the claim it waits for
        carries the results too).
        """

    async def settled(self, soon: bool = False) -> None:
        """Return once every change made so far is durable (at once but on a durable
        embedded store). `soon`: start no commit for it, ride the next one another
        call starts (at the latest a few milliseconds later): for an answer only its
        caller waits on."""

    async def cancel(
        self, tenant: str | None, job_id: str, reason: str = "", actor: str = ""
    ) -> model.CancelResult:
        """Cancel a job or a group, as the module docstring says."""

    async def recover(self) -> list[model.JobEvent]:
        """Handle what fell due: expired leases, run timeouts, due retries, queue timeouts.

        Safe to call from many replicas at once: each due item is handled by
        exactly one call. Returns the transitions it made.
        """

    async def acquire_leadership(self, holder: str, ttl: timedelta) -> bool:
        """Hold (or renew) the recovery leadership for `ttl`; True if `holder` has it."""

    def watch(self, tenant: str | None, job_id: str) -> AsyncIterator[model.Job]:
        """Snapshots of one job: the current one first, then one per change.

        A change is any difference in status, progress, stage, queue_position
        or (for a group) its children's statuses. Ends after the first terminal
        snapshot. Raises JobNotFound first if the job is unknown to the tenant.
        """

    async def events(
        self,
        after: str = "0",
        count: int = 100,
        block: timedelta | None = None,
    ) -> list[model.JobEvent]:
        """Audit events after stream position `after` ("0" = from the start).

        With `block`, waits up to that long for the first new event.
        """

    async def newest_event_id(self) -> str:
        """The position of the newest audit event ("0" when there is none). O(1).

        Passed as `after` to `events`, it reads only events appended later.
        """

    async def queue_depths(self) -> dict[tuple[str, model.Priority], int]:
        """Claimable jobs per (model, priority), every pool's. O(queue classes x priorities)."""

    async def ready_counts(self) -> dict[tuple[str, model.Priority, str], int]:
        """Claimable jobs per (model, priority, pool) ("" = any pool). O(queue classes x 3)."""

    async def in_flight(self) -> dict[str, int]:
        """PROCESSING jobs (live leases) per model. O(models)."""

    # -- the fleet (ListWorkers, ListQueues, KEDA's scaler) --------------------

    async def record_workers(self, seen: Sequence[model.WorkerSighting]) -> None:
        """Write a batch of sightings to the worker registry, in one round trip.

        Each entry gets the store's clock less the sighting's age; a later
        sighting never moves `last_seen` back; a sighting without a pool
        keeps the recorded pool and models. Entries not seen for
        `store.workers.retention()` are dropped here (store/workers.py).
        Redis keeps the registry in partition 0.
        """

    async def list_workers(self) -> list[model.WorkerInfo]:
        """Every worker seen in the last 120 s or holding a live lease, most recently
        seen first, with the jobs it holds live leases on (store/workers.py `listed`).

        O(registered workers + live leases).
        """

    async def queue_stats(self) -> list[model.QueueStats]:
        """One entry per (model, priority, pool) with queued or processing jobs.

        A PROCESSING job counts under the pool it is bound to;
        `oldest_queued_time` is when the longest-waiting QUEUED job became
        QUEUED (None when none is). Costs: each backend's docstring.
        """

    async def demand(self, model: str, pool: str | None) -> int:
        """QUEUED + PROCESSING jobs of `model` that workers of `pool` could take or run:
        those bound to `pool` or to any pool; every job of the model when `pool` is None.

        KEDA's metric (gateway_server/scaler.py). O(priorities x partitions).
        """

    def listen_model(
        self, model: str, every_change: bool = False
    ) -> contextlib.AbstractContextManager[Listener]:
        """Wake-ups that may change `model`'s demand (a level-triggered Listener, store/poll.py).

        A job of the model became claimable ("r"), or its queue shrank
        ("q"); with `every_change`, any job's change too (a running job that
        ends publishes only its id, not its model). Raises StoreUnavailable
        on a closed store.
        """
