"""The fault suite's ledger and the invariants every scenario must keep.

A scenario leaves four kinds of evidence, gathered into one `Ledger`:

- `attempts`: what the worker handler wrote (job id, attempt, lease id,
  worker id, start, end), one per handler run;
- `refusals`: the daemon's own word that a call of an attempt was refused
  (LEASE_LOST, JOB_CANCELLED), read from its JSON log;
- `stops`: when the harness killed or stopped a worker process, so an attempt
  the handler could not close ends there;
- `calls`, `finals`, `events`, `counters`: every client call and its answer,
  each job's last snapshot after the drain, the audit stream, and the
  admission counters read from the store.

Every check is a pure function of the ledger returning the violations it
found, one readable line each, so a scenario asserts `check_all(...) == []`
and a unit test can prove each check fails on a crafted bad ledger.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

TERMINAL = frozenset({"completed", "failed", "cancelled", "partial"})
IN_FLIGHT = frozenset({"queued", "processing"})
LIVE = frozenset({"held", "queued", "processing"})
#: Lease expiry and run timeout are recovery's doing; any other requeue is a retry.
EXPIRY_CODES = frozenset({"LEASE_EXPIRED", "RUN_TIMEOUT"})
#: Faults after which a job waits for recovery (SIGTERM drains, SIGCONT resumes).
CUTTING_SIGNALS = frozenset({"SIGKILL", "SIGSTOP"})
#: The outcome a handler records just before it kills its own worker.
DIED = "poison"


@dataclass(frozen=True)
class Attempt:
    """One handler run, as the handler recorded it (`end` None: it never returned)."""

    job_id: str
    attempt: int
    lease_id: str
    worker_id: str
    start: float
    end: float | None = None
    outcome: str = ""


@dataclass(frozen=True)
class Refusal:
    """The server refused a call of `worker_id` about `job_id` with `reason` at `time`."""

    job_id: str
    worker_id: str
    reason: str
    time: float


@dataclass(frozen=True)
class Stop:
    """The harness killed (or froze) worker `worker_id` at `time`."""

    worker_id: str
    time: float
    kind: str = "SIGKILL"


@dataclass(frozen=True)
class Call:
    """One client call and its answer (`code` "OK" or a gRPC status name)."""

    method: str
    job_id: str
    start: float
    end: float
    code: str = "OK"
    reason: str = ""
    status: str = ""


@dataclass(frozen=True)
class Final:
    """A job's snapshot after the final drain."""

    job_id: str
    tenant: str
    status: str
    attempts: int
    max_attempts: int
    kind: str = "single"
    parent_id: str = ""
    max_parallel: int = 0
    error_code: str = ""
    #: The pool the job is bound to ("" = any pool), as the server answered.
    pool: str = ""
    #: A group child's place among its siblings.
    child_index: int = 0


@dataclass(frozen=True)
class Event:
    """One audit-stream entry (statuses lower-case, `from_status` "" at creation)."""

    job_id: str
    from_status: str
    to_status: str
    attempts: int = 0
    parent_id: str = ""
    tenant: str = ""
    error_code: str = ""
    worker_id: str = ""


@dataclass
class Ledger:
    accepted: set[str] = field(default_factory=set)
    attempts: list[Attempt] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    finals: dict[str, Final] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    #: tenant -> live count, as the store's admission counters say; "*" is the total.
    counters: dict[str, int] = field(default_factory=dict)
    #: The harness's own workers: every claim they were granted must reach them.
    workers: set[str] = field(default_factory=set)
    #: Placement scenarios: worker id -> the pool its credential claims for. Every
    #: claim in the audit trail must come from one of them.
    worker_pools: dict[str, str] = field(default_factory=dict)
    #: Placement scenarios: job id -> the pool the client's request should bind it to.
    bindings: dict[str, str] = field(default_factory=dict)

    def known_jobs(self) -> set[str]:
        """Accepted jobs and the children of accepted groups."""
        children = {f.job_id for f in self.finals.values() if f.parent_id in self.accepted}
        children |= {e.job_id for e in self.events if e.parent_id in self.accepted}
        return self.accepted | children

    def worker_stops(self) -> list[Stop]:
        """The harness's stops, plus each worker a poison job killed (at that job's end):
        every other attempt running on that worker died with it."""
        deaths = [
            Stop(a.worker_id, a.end, "SIGKILL")
            for a in self.attempts
            if a.outcome == DIED and a.end is not None
        ]
        return [*self.stops, *deaths]

    def events_by_job(self) -> dict[str, list[Event]]:
        grouped: dict[str, list[Event]] = defaultdict(list)
        for event in self.events:
            grouped[event.job_id].append(event)
        return grouped


Check = Callable[[Ledger], list[str]]


def _requeues(events: Sequence[Event]) -> list[Event]:
    return [e for e in events if e.from_status == "processing" and e.to_status == "queued"]


def _is_release(requeue: Event, events: Sequence[Event]) -> bool:
    """A release (store/lua/release.lua) gives a claim nobody received back: the
    job goes PROCESSING -> QUEUED with the claim's attempt taken back, so its
    event carries one attempt less than the claim before it; a retry or an
    expiry keeps the count."""
    before = events[: events.index(requeue)]
    claims = [e for e in before if e.from_status == "queued" and e.to_status == "processing"]
    return bool(claims) and requeue.attempts == claims[-1].attempts - 1


def released_claims(events: Sequence[Event]) -> set[tuple[str, int]]:
    """(job id, attempt) of the claims given back by a release (nobody received them)."""
    released: set[tuple[str, int]] = set()
    by_job: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        by_job[event.job_id].append(event)
    for job_events in by_job.values():
        for requeue in _requeues(job_events):
            if _is_release(requeue, job_events):
                released.add((requeue.job_id, requeue.attempts + 1))
    return released


def check_one_terminal_state(ledger: Ledger) -> list[str]:
    """Every accepted job (and child) ends in exactly one terminal state."""
    problems = []
    by_job = ledger.events_by_job()
    for job_id in sorted(ledger.known_jobs()):
        final = ledger.finals.get(job_id)
        if final is None:
            problems.append(f"{job_id}: accepted but gone at the end (lost)")
            continue
        if final.status not in TERMINAL:
            problems.append(f"{job_id}: still {final.status} after the drain")
        entered = [e.to_status for e in by_job.get(job_id, []) if e.to_status in TERMINAL]
        if len(entered) > 1:
            problems.append(f"{job_id}: entered terminal states {entered}")
    return problems


def check_no_phantom(ledger: Ledger) -> list[str]:
    """No job runs or appears in the audit trail that no client was told about."""
    known = ledger.known_jobs()
    seen = {a.job_id for a in ledger.attempts} | {e.job_id for e in ledger.events}
    return [f"{job_id}: phantom job (never accepted)" for job_id in sorted(seen - known)]


def _attempt_end(attempt: Attempt, stops: Sequence[Stop]) -> float:
    """When the attempt stopped running: its own end, else its worker's stop, else never."""
    if attempt.end is not None:
        return attempt.end
    ends = [s.time for s in stops if s.worker_id == attempt.worker_id and s.time >= attempt.start]
    return min(ends, default=math.inf)


def _refused_after(attempt: Attempt, refusals: Sequence[Refusal]) -> bool:
    return any(
        r.job_id == attempt.job_id
        and r.worker_id == attempt.worker_id
        and r.reason == "LEASE_LOST"
        and r.time >= attempt.start
        for r in refusals
    )


def check_leases_exclusive(ledger: Ledger) -> list[str]:
    """Two attempts of one job overlap only if the older one was then refused LEASE_LOST;
    one attempt number is never handed out twice."""
    problems = []
    by_job: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in ledger.attempts:
        by_job[attempt.job_id].append(attempt)
    for job_id, runs in sorted(by_job.items()):
        leases: dict[int, set[str]] = defaultdict(set)
        for run in runs:
            leases[run.attempt].add(run.lease_id)
        for number, ids in sorted(leases.items()):
            if len(ids) > 1:
                problems.append(f"{job_id}: attempt {number} held by leases {sorted(ids)}")
        runs.sort(key=lambda a: (a.attempt, a.start))
        for index, older in enumerate(runs):
            older_end = _attempt_end(older, ledger.worker_stops())
            for newer in runs[index + 1 :]:
                if newer.lease_id == older.lease_id or newer.start >= older_end:
                    continue
                if not _refused_after(older, ledger.refusals):
                    problems.append(
                        f"{job_id}: attempt {older.attempt} (lease {older.lease_id}) still ran "
                        f"when attempt {newer.attempt} started, and was never refused LEASE_LOST"
                    )
    return problems


def check_attempts(ledger: Ledger) -> list[str]:
    """attempts = (1 if the attempt that ended it was claimed) + expiries + retries,
    never more than max_attempts, and no handler ran an attempt the job never counted."""
    problems = []
    by_job = ledger.events_by_job()
    ran: dict[str, int] = defaultdict(int)
    for attempt in ledger.attempts:
        ran[attempt.job_id] = max(ran[attempt.job_id], attempt.attempt)
    for job_id, final in sorted(ledger.finals.items()):
        if final.kind == "group":
            continue
        if final.max_attempts and final.attempts > final.max_attempts:
            problems.append(f"{job_id}: {final.attempts} attempts > max {final.max_attempts}")
        if ran[job_id] > final.attempts:
            problems.append(f"{job_id}: handler ran attempt {ran[job_id]} of {final.attempts}")
        events = by_job.get(job_id)
        if not events:
            continue
        # A release takes its attempt back: it is neither a retry nor an expiry.
        requeues = [e for e in _requeues(events) if not _is_release(e, events)]
        expiries = sum(1 for e in requeues if e.error_code in EXPIRY_CODES)
        retries = len(requeues) - expiries
        last = events[-1]
        claimed_last = int(last.from_status == "processing" and last.to_status in TERMINAL)
        expected = claimed_last + expiries + retries
        if final.attempts != expected:
            problems.append(
                f"{job_id}: attempts {final.attempts} != {claimed_last} + {expiries} expiries "
                f"+ {retries} retries"
            )
    return problems


def check_terminal_never_changes(ledger: Ledger) -> list[str]:
    """Once a client saw a terminal status, every later answer shows the same one;
    and the audit trail never leaves a terminal state."""
    problems = []
    first_terminal: dict[str, Call] = {}
    for call in sorted(ledger.calls, key=lambda c: c.end):
        if not call.status or call.code != "OK":
            continue
        seen = first_terminal.get(call.job_id)
        if seen is not None and call.start > seen.end and call.status != seen.status:
            problems.append(
                f"{call.job_id}: {call.method} answered {call.status} after {seen.status}"
            )
        if seen is None and call.status in TERMINAL:
            first_terminal[call.job_id] = call
    for event in ledger.events:
        if event.from_status in TERMINAL:
            problems.append(f"{event.job_id}: audit shows {event.from_status} -> {event.to_status}")
    return problems


def check_group_parallelism(ledger: Ledger) -> list[str]:
    """Replaying the audit trail, no group has more than max_parallel children in flight."""
    problems = []
    caps = {f.job_id: f.max_parallel for f in ledger.finals.values() if f.kind == "group"}
    status: dict[str, str] = {}
    in_flight: dict[str, set[str]] = defaultdict(set)
    worst: dict[str, int] = defaultdict(int)
    for event in ledger.events:
        status[event.job_id] = event.to_status
        if event.parent_id not in caps:
            continue
        flying = in_flight[event.parent_id]
        if event.to_status in IN_FLIGHT:
            flying.add(event.job_id)
        else:
            flying.discard(event.job_id)
        worst[event.parent_id] = max(worst[event.parent_id], len(flying))
    for parent, cap in sorted(caps.items()):
        if cap and worst[parent] > cap:
            problems.append(f"{parent}: {worst[parent]} children in flight > max_parallel {cap}")
    return problems


def check_admission_counters(ledger: Ledger) -> list[str]:
    """The store's live counters equal the live jobs at the end, per tenant and in total."""
    live: dict[str, int] = defaultdict(int)
    for final in ledger.finals.values():
        if final.status in LIVE:
            live[final.tenant] += 1
    problems = []
    tenants = {t for t in ledger.counters if t != "*"} | set(live)
    for tenant in sorted(tenants):
        if ledger.counters.get(tenant, 0) != live[tenant]:
            problems.append(
                f"tenant {tenant}: live counter {ledger.counters.get(tenant, 0)} "
                f"!= {live[tenant]} live jobs"
            )
    total = sum(live.values())
    if ledger.counters.get("*", 0) != total:
        problems.append(f"live_total {ledger.counters.get('*', 0)} != {total} live jobs")
    return problems


def check_claims_reach_their_worker(ledger: Ledger) -> list[str]:
    """Every claim granted to one of our workers that was never killed, frozen or
    drained ran on it: no job is left leased to nobody (a lost reply, a claim
    whose caller gave up)."""
    faulted = {s.worker_id for s in ledger.worker_stops()}
    ran = {(a.job_id, a.attempt) for a in ledger.attempts}
    ran |= released_claims(ledger.events)  # given back at once: not leased to nobody
    return [
        f"{e.job_id}: attempt {e.attempts} was granted to {e.worker_id} but never ran there"
        for e in ledger.events
        if e.from_status == "queued"
        and e.to_status == "processing"
        and e.worker_id in ledger.workers
        and e.worker_id not in faulted
        and (e.job_id, e.attempts) not in ran
    ]


def claim_events(ledger: Ledger) -> list[Event]:
    """The audit trail's claims: QUEUED -> PROCESSING of a job that is not a group's
    parent (a parent starts with its first child, claimed by nobody)."""
    parents = {f.job_id for f in ledger.finals.values() if f.kind == "group"}
    return [
        e
        for e in ledger.events
        if e.from_status == "queued" and e.to_status == "processing" and e.job_id not in parents
    ]


def _misplaced(job_id: str, worker_id: str, ledger: Ledger, what: str) -> str | None:
    """Why `worker_id` may not have held `job_id`, or None when its pool may take it."""
    if worker_id not in ledger.worker_pools:
        return f"{job_id}: {what} {worker_id!r}, a worker of no known pool"
    final = ledger.finals.get(job_id)
    served = ledger.worker_pools[worker_id]
    if final is not None and final.pool not in ("", served):
        return f"{job_id}: bound to pool {final.pool!r}, {what} {worker_id} of pool {served!r}"
    return None


def check_placement(ledger: Ledger) -> list[str]:
    """DESIGN's placement rule on every claim path: every claim the audit trail
    records, and every attempt a handler ran, was a worker's whose pool is the
    job's or who took an any-pool job; a claim by a worker the scenario does not
    know the pool of is a violation too (the check could not vouch for it)."""
    problems = [
        _misplaced(e.job_id, e.worker_id, ledger, "claimed by") for e in claim_events(ledger)
    ]
    problems += [_misplaced(a.job_id, a.worker_id, ledger, "ran on") for a in ledger.attempts]
    return [problem for problem in problems if problem is not None]


def check_bindings(ledger: Ledger) -> list[str]:
    """Every job the scenario knows the binding of is bound to that pool: a
    restricted tenant's job naming none to its first pool, any other to the one
    it named (or any pool)."""
    problems = []
    for job_id, expected in sorted(ledger.bindings.items()):
        final = ledger.finals.get(job_id)
        if final is not None and final.pool != expected:
            problems.append(f"{job_id}: bound to pool {final.pool!r}, expected {expected!r}")
    return problems


def claims_per_pool(ledger: Ledger) -> dict[str, int]:
    """Claims in the audit trail by the pool of the worker that made them."""
    counts: dict[str, int] = defaultdict(int)
    for event in claim_events(ledger):
        counts[ledger.worker_pools.get(event.worker_id, "?")] += 1
    return dict(sorted(counts.items()))


CHECKS: tuple[Check, ...] = (
    check_one_terminal_state,
    check_no_phantom,
    check_leases_exclusive,
    check_attempts,
    check_terminal_never_changes,
    check_group_parallelism,
    check_admission_counters,
)
#: DESIGN's exactly-once rule, checked where a scenario targets it (lost replies):
#: a Redis crash may still orphan a claim whose reply died with it.
EXTRA_CHECKS: tuple[Check, ...] = (check_claims_reach_their_worker,)
#: The placement scenario's oracle (tests/faults/test_placement.py).
PLACEMENT_CHECKS: tuple[Check, ...] = (check_placement, check_bindings)


def check_all(ledger: Ledger, skip: Iterable[Check] = (), extra: Iterable[Check] = ()) -> list[str]:
    """Every invariant's violations (plus `extra` checks'), prefixed with the check's name."""
    skipped = set(skip)
    return [
        f"{check.__name__}: {problem}"
        for check in (*CHECKS, *extra)
        if check not in skipped
        for problem in check(ledger)
    ]


def doubled(ledger: Ledger) -> int:
    """Jobs that entered a terminal state twice or had two unfenced leases at once."""
    by_job = ledger.events_by_job()
    twice = {
        job for job, events in by_job.items() if sum(e.to_status in TERMINAL for e in events) > 1
    }
    overlapping = {line.split(":")[0] for line in check_leases_exclusive(ledger)}
    return len(twice | overlapping)


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, math.ceil(fraction * len(ordered)) - 1)
    return ordered[rank]


def _cut(attempt: Attempt, stops: Sequence[Stop]) -> float | None:
    """When a fault cut the attempt short (its worker killed or frozen, or the
    handler killing its own worker), else None."""
    end = math.inf if attempt.end is None else attempt.end
    cuts = [
        s.time
        for s in stops
        if s.worker_id == attempt.worker_id
        and s.kind in CUTTING_SIGNALS
        and attempt.start <= s.time <= end
    ]
    if attempt.outcome == DIED:
        cuts.append(end)
    return min(cuts, default=None)


def recovery_times(ledger: Ledger) -> list[float]:
    """For each attempt cut short by a fault, seconds until the job's next attempt started."""
    by_job: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in ledger.attempts:
        by_job[attempt.job_id].append(attempt)
    gaps = []
    for runs in by_job.values():
        runs.sort(key=lambda a: a.start)
        for index, run in enumerate(runs):
            cut = _cut(run, ledger.stops)
            later = [r.start for r in runs[index + 1 :]]
            if cut is not None and later:
                gaps.append(max(0.0, later[0] - cut))
    return gaps
