"""The embedded store on disk (`jobgate serve --data-dir DIR`): LocalEngine's state in a journal.

What persists (store/journal/): every `Record` as a whole row, its payload
and result as blobs; the audit events (capped at events_max_length); the
meta values of `META` (state attributes no record holds). Which records a
commit writes: those `Changes` names (store/memory/changes.py): the record
and parent of every event, plus the few changes without an event.

What is rebuilt at start (`restore`, `Backfill`), never stored: the queues
(QUEUED and PROCESSING jobs in their `seq` order, hidden while leased or
backing off), the deadline heaps, the idempotency key map, the live and
in-flight counters, ListJobs' indexes. Not kept at all: leadership and the
worker registry. A lease that expired while the store was down is recovered
by the next `recover`, as usual. Jobs past their TTL are dropped at load
(and from the file by the next commit). Terminal jobs' payloads stay on
disk (UNLOADED), read back only if one is claimed again.

A start in two steps (store/journal/loading.py): the open records first,
and the store answers; the finished ones merged behind (`Backfill`), while
the calls that may need one wait for them (LocalEngine `_finished_loaded`).

Adding state: a new Record field persists with no code; a new transition
too, as long as it emits an event or calls `changes.touched`; a new
store-wide value that records cannot rebuild goes into `META`; a new index
is rebuilt in `restore`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from store import policy
from store.journal import DataDirRefused, EventReader, Journal, Loaded, RowCodec, Tables
from store.journal.codec import json_value_codec
from store.memory.changes import Changes
from store.memory.record import Record
from store.memory.state import State
from store.model import (
    LIVE_STATUSES,
    GroupSpec,
    JobEvent,
    JobKind,
    JobStatus,
    Priority,
    StoreSettings,
    SubmitRequest,
)

#: The file's tables: every Record field and every JobEvent field, by the codec.
TABLES = Tables(
    records=RowCodec(Record, "id"),
    events=RowCodec(JobEvent, "id", overrides={"id": ("INTEGER", int, str)}),
)
#: State attributes that are store-wide and not derivable from the records,
#: with their types (for the JSON of the meta table): the FIFO counter and the
#: fair-share passes (store/memory/state.py next_score).
META: dict[str, Any] = {
    "seq": int,
    "floors": dict[tuple[str, Priority], float],
    "passes": dict[tuple[str, Priority, str], float],
}
_META_CODECS = {name: json_value_codec(hint, f"State.{name}") for name, hint in META.items()}
#: The meta value that fixes --fair-share for the directory's life (as Redis does).
FAIR_SHARE = "fair_share"
#: Bytes one job is taken to need on disk besides its payload (row, index, event).
JOB_OVERHEAD = 1024


class JournalChanges(Changes):
    """The state's changes, marked in the journal (see store/memory/changes.py)."""

    def __init__(self, journal: Journal[State]) -> None:
        self.journal = journal

    def emitted(self, record: Record, event: JobEvent) -> None:
        if event.from_status is None:
            self.journal.created(record.id)  # no blob of it on disk yet
        self.journal.mark(record.id)
        if record.parent_id:
            self.journal.mark(record.parent_id)  # its counters and progress moved
        self.journal.append(event)

    def touched(self, record: Record, lazy: bool = False) -> None:
        self.journal.mark(record.id, lazy)

    def payload(self, record: Record) -> bytes:
        return self.journal.blob(record, "payload")


#: Finished jobs' payloads stay on disk (never read, unless one is retried:
#: then from the file); every result is loaded.
LAZY_BLOBS = ("payload",)


def bytes_needed(requests: Sequence[SubmitRequest]) -> int:
    """About what creating these jobs adds to the file (the disk reserve's check)."""
    total = 0
    for request in requests:
        specs = request.work.children if isinstance(request.work, GroupSpec) else (request.work,)
        total += JOB_OVERHEAD * (len(specs) + 1) + sum(len(spec.payload) for spec in specs)
    return total


def _children(record: Record) -> list[str]:
    return record.children


def open_journal(
    settings: StoreSettings,
    directory: str | Path,
    sync: str = "full",
    clock: Callable[[], float] = time.time,
    **knobs: Any,
) -> Journal[State]:
    """The journal of `directory` (not opened yet); `knobs` are Journal's (tests: max_pages...)."""
    return Journal(
        Path(directory),
        TABLES,
        sync=sync,
        events_cap=settings.events_max_length,
        clock=clock,
        lazy_blobs=LAZY_BLOBS,
        companions=_children,
        **knobs,
    )


def event_reader(directory: str | Path) -> EventReader:
    """The audit trail of `directory`, read-only (`jobgate events --data-dir`)."""
    return EventReader(Path(directory), TABLES.events)


class MetaOf:
    """The meta values to persist (JSON-able), for every commit; each encoded again
    only when it changed (the journal skips a value that is the same object as at
    its last seal).
    The fair-share floors and passes are dicts changed in place: compared with a
    copy of what was encoded (cheaper than encoding them for every commit)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self._raw: dict[str, Any] = {}
        self._encoded: dict[str, Any] = {FAIR_SHARE: _fair_share_mode(state.settings)}

    def __call__(self) -> dict[str, Any]:
        raw, encoded = self._raw, self._encoded
        for name, (encode, _) in _META_CODECS.items():
            value = getattr(self.state, name)
            if name not in raw or raw[name] != value:
                raw[name] = dict(value) if isinstance(value, dict) else value
                encoded[name] = encode(value)
        return encoded


def _fair_share_mode(settings: StoreSettings) -> str:
    return "tenant" if settings.fair_share else "off"


def _check_fair_share(settings: StoreSettings, meta: dict[str, Any]) -> None:
    recorded = meta.get(FAIR_SHARE)
    mode = _fair_share_mode(settings)
    if recorded is not None and recorded != mode:
        raise DataDirRefused(
            f"this data directory was run with --fair-share {recorded}; "
            f"a server started with --fair-share {mode} cannot use it"
        )


def restore(
    settings: StoreSettings, clock: Callable[[], float], loaded: Loaded, changes: Changes
) -> State:
    """A State from what the file held: records as they were, indexes rebuilt.

    At a start `loaded` holds the open records (live work and its groups) and
    the finished ones follow through `Backfill`; after a failed commit it
    holds every record.
    """
    state = State(settings, clock, changes)
    _check_fair_share(settings, loaded.meta)
    for name, (_, decode) in _META_CODECS.items():
        if name in loaded.meta:
            setattr(state, name, decode(loaded.meta[name]))
    state.jobs = {}
    backfill = Backfill(state)
    backfill.add(loaded.records)
    backfill.done()
    _restore_events(state, loaded.events)
    return state


def revive_kept_children(records: Mapping[str, Record]) -> list[str]:
    """The children of open groups that still carry an expiry, cleared of it; their ids.

    A group's children expire with it, so an open group's are open too; but a
    RetryJob of a group used to clear a kept COMPLETED child's expiry in memory
    only (redrive.py marks it now), and the file kept it: its row would be
    deleted then while the group still ran. These come back open, to be
    written again.
    """
    revived = []
    for record in records.values():
        if record.children and record.expire_at is None:
            for child_id in record.children:
                child = records.get(child_id)
                if child is not None and child.expire_at is not None:
                    child.expire_at = None
                    revived.append(child_id)
    return revived


class Backfill:
    """Records merged into a restored state, chunk by chunk (the finished jobs a
    start loads behind the first answers); `done` once all are in.

    One pass per chunk: a record the state holds already is kept (memory is
    newer than what a reader saw), one past its TTL is skipped (the next
    commit deletes its row); a finished one only names its key and gets its
    expiry (pushed by `done`, one heapify); a live one is counted, gets its
    deadlines and, queued or leased, its place in its queue.
    """

    def __init__(self, state: State) -> None:
        self.state = state
        self._expiries: list[tuple[float, str, str]] = []

    def add(self, records: dict[str, Record]) -> None:
        state = self.state
        now = state.clock()
        jobs = state.jobs
        added: list[Record] = []
        slotted: list[Record] = []
        for key, record in records.items():
            expire_at = record.expire_at
            if key in jobs or (expire_at is not None and expire_at <= now):
                continue
            jobs[key] = record
            added.append(record)
            if not record.parent_id:
                if record.idempotency_key:
                    state.keys.setdefault((record.tenant, record.idempotency_key), record.id)
                if expire_at is not None:
                    self._expiries.append((expire_at, record.id, ""))
            if record.status in LIVE_STATUSES and record.kind is not JobKind.GROUP:
                _restore_live(state, record)
                if record.status is not JobStatus.HELD:
                    slotted.append(record)
        state.index.fill(added)
        _restore_queues(state, slotted)

    def done(self) -> None:
        self.state.expiries.fill(self._expiries)
        self._expiries = []


def _restore_live(state: State, record: Record) -> None:
    """Count a live job (a group counts as its children), push its deadlines, and
    raise the fair-share state to what it holds."""
    _restore_passes(state, record)
    state.live_by_tenant[record.tenant] = state.live_by_tenant.get(record.tenant, 0) + 1
    state.live_total += 1
    if record.status is JobStatus.PROCESSING:
        job_class = policy.queue_class(record.model, record.pool)
        state.in_flight[job_class] = state.in_flight.get(job_class, 0) + 1
        state.leases.push(record.lease_deadline, record.id, record.lease_id)
        if record.run_timeout > 0:
            state.runs.push(record.run_deadline, record.id, record.lease_id)
    elif record.status is JobStatus.QUEUED:
        if record.queue_deadline > 0:
            state.queue_waits.push(record.queue_deadline, record.id)
        if record.ready_at > 0:
            state.retries.push(record.ready_at, record.id)


def _restore_passes(state: State, record: Record) -> None:
    """The journal writes the meta values at most every LAZY_DELAY, so after a crash
    the file's passes and floors may be a moment old: a tenant's pass is at least
    its live jobs' (so its next job still queues behind them: FIFO within a
    tenant), a floor at least what its leased jobs were handed out at."""
    if record.weight <= 0 or not record.seq:
        return  # fair share off (the FIFO counter: _restore_queues), or never queued
    tenant = (record.model, record.priority, record.tenant)
    state.passes[tenant] = max(state.passes.get(tenant, 0.0), record.seq)
    if record.status is JobStatus.PROCESSING:
        handed_out = (record.model, record.priority)
        state.floors[handed_out] = max(state.floors.get(handed_out, 0.0), record.seq)


def _restore_queues(state: State, slotted: list[Record]) -> None:
    """Queued and leased jobs back in their queues, in their original order."""
    slotted.sort(key=lambda record: record.seq)
    for record in slotted:
        queue = state.queue_of(record)
        queue.append(record.id, record.seq)
        if record.status is JobStatus.PROCESSING or record.ready_at > 0:
            queue.take(record.id)  # leased, or waiting out a retry back-off
    fifo = [int(record.seq) for record in slotted if record.weight <= 0]
    state.seq = max([state.seq, *fifo])  # unchanged by an empty chunk


def _restore_events(state: State, events: list[JobEvent]) -> None:
    state.events = events
    if events:
        state.first_event = int(events[0].id)
        state.next_event = int(events[-1].id) + 1
