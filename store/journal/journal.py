"""The journal: an in-memory store's state kept in a SQLite file, with group commit.

Roles. The store's transitions stay plain synchronous code on one event
loop; as they run they `mark` the records they touched and `append` their
audit events. Before an answer leaves the store it awaits `settled()`,
which returns once everything marked so far is committed. One flusher task
seals what was marked since the last commit into a batch (rows encoded on
the loop, between transitions, so a batch is a consistent cut) and hands it
to the writer thread (store/journal/writer.py) as ONE transaction; whatever
is marked while that commit runs waits for the next one. Concurrent calls
therefore share a commit, and its fsync under `full`. Under `normal` the
commit is one write of the batch to the commit log (store/journal/log.py),
and the logged batches reach SQLite together, every APPLY_EVERY (`_apply`).

What is written: each marked record as a whole row (its dataclass's fields
through the codec), so a new field or a new transition needs no persistence
code; the events appended; meta values (store-wide, not derivable from
records: `meta()` of `attach`) when they changed. TTL deletions and the
audit cap happen inside the commits.

Lazy marks (`mark(key, lazy=True)`, for heartbeats) do not make `settled()`
wait; they are committed with the next batch, at the latest `lazy_delay`
seconds later. A caller whose answer nobody else waits on (a worker's
results) may `settled(soon=True)`: it waits for a commit as every caller
does, but starts none; the next caller's commit carries its changes, or the
flusher commits them `commit_delay` seconds later.

Failure: a commit that fails (a full disk past the reserve, an I/O error)
leaves the file at the previous batch while memory went further. Every call
waiting on that batch or the next one gets StoreUnavailable, the journal
refuses calls (`check`) and `on_diverged` is told, so the owner rebuilds its
memory from the file (`reload`) and `resume`s.

Full disk: `check_room(nbytes)` raises QueueFull when a new job of about
`nbytes` would leave less than `reserve` bytes, so what ends or updates
work (heartbeats, results, cancels) still has room after Submit is refused.
The room is the disk's free space, `max_page_count` and the process's
file-size limit (`ulimit -f`), whichever ends first (Writer.room).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

from store.errors import QueueFull, StoreUnavailable
from store.journal import collector, loading
from store.journal.codec import Unloaded
from store.journal.errors import DataDirRefused
from store.journal.lock import DirLock
from store.journal.schema import Tables
from store.journal.writer import (
    Companions,
    LazyBlobs,
    Loaded,
    Work,
    Writer,
    estimate_bytes,
    no_companions,
)

S = TypeVar("S")  # what the owner builds from a Loaded (its state)

#: Bytes kept free for updates once Submit is refused (1,000s of results and
#: cancels, their audit events and the WAL's growth between checkpoints).
DEFAULT_RESERVE = 32 * 1024 * 1024
LAZY_DELAY = 0.5
#: How long `settled(soon=True)` lets an open batch wait for another caller's commit.
COMMIT_DELAY = 0.01
HOUSEKEEPING_EVERY = 1.0
#: Passes of a busy event loop a commit waits for before it seals (its
#: callers' answers wait for them too): one Submit at a time went from 2.3
#: to 1.1-1.7 commits per job with 16 (bench section 18).
SEAL_YIELDS = 16
#: Blobs remembered as written (so a claim or a result does not write its job's
#: payload again); past this many all are forgotten, and written again once.
BLOBS_REMEMBERED = 200_000


class _Batch:
    """The marks of one commit and the callers waiting for it: each waits on a future
    of its own (one leaving cancels nothing), all resolved when it is committed
    or fails. (A shared future under asyncio.shield took two loop passes more.)"""

    __slots__ = ("eager", "failure", "resolved", "waiters")

    def __init__(self) -> None:
        self.eager = False
        self.waiters: list[asyncio.Future[None]] = []
        self.failure: StoreUnavailable | None = None
        self.resolved = False

    def wait(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.resolved:
            _settle(waiter, self.failure)
        else:
            self.waiters.append(waiter)
        return waiter

    def resolve(self, failure: StoreUnavailable | None = None) -> None:
        self.failure, self.resolved = failure, True
        for waiter in self.waiters:
            _settle(waiter, failure)
        self.waiters = []


def _settle(waiter: asyncio.Future[None], failure: StoreUnavailable | None) -> None:
    if waiter.done():  # its caller left
        return
    if failure is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(failure)


def _prepared_directory(directory: Path) -> Path:
    if directory.exists() and not directory.is_dir():
        raise DataDirRefused(f"--data-dir {directory} is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataDirRefused(f"--data-dir {directory}: {error.strerror}") from None
    return directory


class Journal(Generic[S]):
    """See the module docstring. Used from one event loop; the writer owns one thread."""

    def __init__(
        self,
        directory: Path,
        tables: Tables,
        *,
        sync: str = "full",
        events_cap: int = 100_000,
        clock: Callable[[], float] = time.time,
        lazy_blobs: LazyBlobs = (),
        companions: Companions = no_companions,
        reserve: int = DEFAULT_RESERVE,
        lazy_delay: float = LAZY_DELAY,
        commit_delay: float = COMMIT_DELAY,
        housekeeping_every: float = HOUSEKEEPING_EVERY,
        checkpoint_every: float = 30.0,
        max_pages: int | None = None,
        inline: bool | None = None,
    ) -> None:
        self.directory = directory
        self.tables = tables
        self.reserve = reserve
        self.lazy_delay = lazy_delay
        self.commit_delay = commit_delay
        self.housekeeping_every = housekeeping_every
        self.on_diverged: Callable[[], None] = lambda: None
        self._clock = clock
        self._lazy_blobs = frozenset(lazy_blobs)
        self._companions = companions
        #: the writing connection's owner; every call to it runs on the journal's thread
        #: (inline, by default under `normal`: commits to the log and applies on the loop,
        #: checkpoints on the thread)
        inline = sync == "normal" if inline is None else inline
        self.writer = Writer(
            directory, tables, sync, events_cap, checkpoint_every, max_pages, inline,
            log_limit=reserve // 4,  # the log's bytes come out of the reserve
        )  # fmt: skip
        self._lock = DirLock(directory)
        self._executor: ThreadPoolExecutor | None = None
        self._reader: sqlite3.Connection | None = None
        self._records: Mapping[Any, Any] = {}
        self._meta: Callable[[], Mapping[str, Any]] = dict
        self._written_meta: dict[str, str] = {}
        self._sealed_meta: dict[str, Any] = {}  # the values last sealed, as objects
        self._next_meta = 0.0  # (monotonic) when a seal may write the meta values again
        self._meta_forced = False  # flush(): the next seal writes them
        #: per blob field, key -> the bytes object the file holds (as committed or
        #: being committed; forgotten on a failure, a reload, TTL deletions)
        self._blobs_written: list[dict[Any, bytes]] = [{} for _ in tables.records.blobs]
        self._dirty: dict[Any, None] = {}
        self._events: list[Any] = []
        self._lazy_due: float | None = None
        self._open_batch: _Batch | None = None
        self._inflight: _Batch | None = None
        self._kick = asyncio.Event()
        #: the one timer that kicks the flusher at housekeeping or a lazy mark's due
        #: time, and that time (moved only when it changes, not per commit)
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_when = 0.0
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._failure: StoreUnavailable | None = None
        self._room = 0
        #: disk bytes reserved by check_room so far, and the part the file holds
        #: (committed to SQLite); the difference is what the room does not show yet
        self._reserved = 0
        self._reserved_applied = 0
        self._apply_forced = False  # flush(): the next commit applies the log too
        self._collector_paused = False

    @property
    def commits(self) -> int:
        """Transactions committed so far (tests prove batching with it)."""
        return self.writer.commits

    @property
    def path(self) -> Path:
        return self.writer.path

    async def connection_settings(self) -> dict[str, Any]:
        """journal_mode and synchronous of the writing connection (diagnostics, tests)."""
        settings: dict[str, Any] = await self._run(self.writer.connection_settings)
        return settings

    # -- open, reload, close ---------------------------------------------------

    async def open(self, build: Callable[[Loaded], S]) -> S:
        """Lock the directory, check the file and `build` the owner's state from its
        open records (store/journal/loading.py), on the writer thread; the finished
        records follow through `load_closed`.

        DataDirRefused when the directory cannot be used (the message says why).
        """
        _prepared_directory(self.directory)
        self._lock.acquire()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="jobgate-journal")
        collector.pause()  # until the finished records are in too (load_closed)
        self._collector_paused = True
        try:
            await self._run(self.writer.open)
            state: S = await self._run(lambda: self._built(build, everything=False))
            self._room = await self._run(self.writer.room)
            self._reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        except BaseException:
            await self._shut_down()
            raise
        self._closing = False
        self._flusher = asyncio.create_task(self._flush_forever(), name="jobgate-journal-flush")
        return state

    def _built(self, build: Callable[[Loaded], S], everything: bool) -> S:
        """`build(loaded)` with the collector paused: a load makes millions of objects
        and no cycles, and each collection meanwhile would walk all of them again
        (restoring a million jobs took twice as long with it running)."""
        with collector.paused():
            if everything:
                loaded = self.writer.load(self._lazy_blobs)
            else:
                loaded = self.writer.load_open(self._lazy_blobs, self._companions)
            self._written_meta = {name: _json(value) for name, value in loaded.meta.items()}
            return build(loaded)

    async def load_closed(self, merge: Callable[[dict[Any, Any]], None]) -> int:
        """Read the finished records (after `open`) on a thread of their own and
        `merge` them chunk by chunk on the loop, answers running between chunks;
        how many. Commits go on meanwhile: the reader has its own connection.
        The owner keeps what it holds already over a row read here (memory is
        newer), and drops what is past its TTL."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[dict[Any, Any] | BaseException | None] = asyncio.Queue()

        def deliver(item: dict[Any, Any] | BaseException | None) -> None:
            loop.call_soon_threadsafe(chunks.put_nowait, item)

        def read() -> None:
            try:
                loading.read_closed(self.path, self.tables, self._lazy_blobs, deliver, stop)
            except BaseException as error:  # told to the loop, raised there
                deliver(error)
            else:
                deliver(None)

        stop = threading.Event()
        executor = ThreadPoolExecutor(1, thread_name_prefix="jobgate-journal-load")
        count = 0
        try:
            executor.submit(read)
            while (item := await chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise StoreUnavailable(f"cannot load the finished jobs: {item}") from item
                merge(item)
                count += len(item)
        finally:
            self._resume_collector()
            stop.set()
            executor.shutdown(wait=False)  # the reader stops at its next chunk
        return count

    def _resume_collector(self) -> None:
        if self._collector_paused:
            self._collector_paused = False
            collector.resume()

    def attach(self, records: Mapping[Any, Any], meta: Callable[[], Mapping[str, Any]]) -> None:
        """Where sealing reads the marked records (by key) and the meta values (JSON-able;
        written in the next commit where they differ from the file's). A value
        `meta()` returns as the same object as at the last seal is taken as
        unchanged (not encoded again): return a new object when one changes."""
        self._records = records
        self._meta = meta
        self._sealed_meta = {}
        self._forget_blobs()

    async def reload(self, build: Callable[[Loaded], S]) -> S:
        """After a failed commit: the owner's state built again from the whole file
        (with what the commit log holds: those commits were acknowledged)."""

        def rebuilt() -> S:
            self.writer.apply_all()
            self._room = self.writer.room()  # (what the log held is in the file now)
            return self._built(build, everything=True)

        state: S = await self._run(rebuilt)
        return state

    def resume(self) -> None:
        """The owner has rebuilt its state (attach first): calls are accepted again."""
        self._failure = None

    async def close(self) -> None:
        """Commit what is marked, checkpoint, release the directory."""
        if self._flusher is not None:
            self._closing = True
            self._kick.set()
            with contextlib.suppress(Exception):
                await self._flusher
            self._flusher = None
        await self._shut_down()

    async def _shut_down(self) -> None:
        self._resume_collector()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._executor is not None:
            with contextlib.suppress(Exception):
                await self._run(self.writer.close)
            self._executor.shutdown(wait=True)
            self._executor = None
        self._lock.release()

    def _run(self, call: Callable[[], Any]) -> Awaitable[Any]:
        if self._executor is None:
            raise StoreUnavailable("the data directory is closed")
        return asyncio.get_running_loop().run_in_executor(self._executor, call)

    # -- what transitions tell it ----------------------------------------------

    def mark(self, key: Any, lazy: bool = False) -> None:
        """Record `key` changed; written whole at the next commit (lazy: within lazy_delay)."""
        self._dirty[key] = None
        if not lazy:
            self._batch().eager = True
        elif self._lazy_due is None:
            self._lazy_due = time.monotonic() + self.lazy_delay
            self._kick.set()

    def created(self, key: Any) -> None:
        """`key` is a new record: the file holds none of its blobs (an empty one needs
        no DELETE at its first commit)."""
        for written in self._blobs_written:
            written[key] = b""

    def append(self, event: Any) -> None:
        self._events.append(event)
        self._batch().eager = True

    def _batch(self) -> _Batch:
        if self._open_batch is None:
            self._open_batch = _Batch()
        return self._open_batch

    # -- answers ----------------------------------------------------------------

    def check(self) -> None:
        """StoreUnavailable while the journal has diverged from memory (until resume)."""
        if self._failure is not None:
            raise self._failure

    async def settled(self, soon: bool = False) -> None:
        """Return once every eager mark made so far is committed.

        At once when nothing is pending; else it waits for the open batch
        (which includes this caller's changes) or for the one being
        committed (whose changes this caller may have read).

        `soon`: start no commit for it; the open batch goes with whatever
        commits next (another caller's settle), at the latest `commit_delay`
        seconds from now. For an answer that nobody else waits on.
        """
        self.check()
        open_batch = self._open_batch if self._open_batch and self._open_batch.eager else None
        batch = open_batch or self._inflight
        if batch is None:
            return
        if soon and batch is open_batch:
            self._alarm_at(time.monotonic() + self.commit_delay)
        else:
            self._kick.set()
        await batch.wait()

    async def flush(self) -> None:
        """Commit everything marked so far, lazy marks and the meta values included."""
        self.check()
        self._meta_forced = True
        self._apply_forced = True
        self._batch().eager = True
        await self.settled()

    def check_room(self, nbytes: int) -> None:
        """QueueFull if about `nbytes` more (not in the file yet) would eat into the reserve."""
        # not in the room yet: what Submits reserved and SQLite does not hold, or (under
        # normal) all the log holds for SQLite, if more (results too; the log's own few
        # MiB, emptied at every apply, come out of the reserve)
        pending = max(self._reserved - self._reserved_applied, self.writer.logged_bytes)
        if self._room - pending - nbytes < self.reserve:
            raise QueueFull("the data directory's disk is full")
        self._reserved += nbytes

    def blob(self, record: Any, name: str) -> bytes:
        """`record`'s blob field `name`, read from the file (once) if the load left it there."""
        value: bytes = getattr(record, name)
        if not isinstance(value, Unloaded):
            return value
        if self._reader is None:
            raise StoreUnavailable("the data directory is closed")
        key = self.tables.records.key_of(record)
        query = f"SELECT data FROM {self.tables.blob_table(name)} WHERE id = ?"
        try:
            row = self._reader.execute(query, (key,)).fetchone()
        except sqlite3.Error as error:
            raise StoreUnavailable(f"cannot read {name} of {key}: {error}") from None
        value = b"" if row is None else bytes(row[0])
        setattr(record, name, value)
        return value

    # -- the flusher --------------------------------------------------------------

    async def _flush_forever(self) -> None:
        housekeeping = time.monotonic() + self.housekeeping_every
        while True:
            due = self._closing or (self._open_batch is not None and self._open_batch.eager)
            if not due or self._failure is not None:
                # (with a batch due, no wait; while failed, _commit returns at once, and
                # this wait is the loop's turn)
                self._alarm_at(self._sleep_until(housekeeping))
                await self._kick.wait()
            self._kick.clear()
            now = time.monotonic()
            eager = self._open_batch is not None and self._open_batch.eager
            lazy_due = self._lazy_due is not None and self._lazy_due <= now
            apply_at = self._apply_at()
            apply_due = apply_at is not None and apply_at <= now
            if eager or lazy_due or apply_due or now >= housekeeping or self._closing:
                # a housekeeping commit (TTL deletions) or the last one applies the log
                applying = now >= housekeeping or self._closing
                housekeeping = now + self.housekeeping_every
                await self._commit(applying)
            settled = not (self._dirty or self._events or self.writer.logged)
            if self._closing and (settled or self._failure is not None):
                if self._alarm is not None:
                    self._alarm.cancel()
                return

    def _alarm_at(self, when: float) -> None:
        """Kick the flusher at `when` (time.monotonic), or earlier. One timer, set again
        only when it rang or `when` comes sooner: a timeout per wait cost a timer per
        commit. (Each commit moves housekeeping later; a timer that rings before it is
        due just wakes the flusher, which sets the next.)"""
        if self._alarm is not None:
            if self._alarm_when <= when:
                return
            self._alarm.cancel()
        self._alarm_when = when
        delay = max(0.0, when - time.monotonic())
        self._alarm = asyncio.get_running_loop().call_later(delay, self._ring)

    def _ring(self) -> None:
        self._alarm = None
        self._kick.set()

    def _sleep_until(self, housekeeping: float) -> float:
        if self._closing or (self._open_batch is not None and self._open_batch.eager):
            return time.monotonic()
        due = [housekeeping]
        if self._lazy_due is not None:
            due.append(self._lazy_due)
        apply_at = self._apply_at()
        if apply_at is not None:
            due.append(apply_at)
        return min(due)

    def _apply_at(self) -> float | None:
        """When the logged batches are due in SQLite; never while failed (the reload
        applies them: a due time in the past would wake the flusher at every pass)."""
        return None if self._failure is not None else self.writer.apply_at()

    async def _commit(self, applying: bool = False) -> None:
        """Seal what is marked and commit it (inline: log it, and apply the log to
        SQLite when due or `applying`)."""
        if self._failure is not None:  # memory is being rebuilt: nothing to write
            return
        # Let the loop run what is ready first (at most SEAL_YIELDS passes): the
        # calls that the batch's transitions woke (a claim waiting for the job a
        # Submit queued) and the requests already read run their transitions
        # and join this commit, instead of each paying a commit of its own.
        await _yield_while_busy()
        if self._failure is not None:
            return
        batch = self._open_batch or _Batch()
        self._open_batch = None
        self._inflight = batch
        writer = self.writer
        try:
            work = self._seal()
            if not writer.inline:
                self._room = await self._run(lambda: writer.commit(work))
                self._committed(work)
            elif not work.empty and writer.too_large_to_log(work):
                # large: straight to SQLite with what the log holds (so the log stays
                # small, inside the disk reserve; a failure fails this batch, unlogged)
                await self._apply_now(work.now, work)
            elif not work.empty:
                self._check_fits(work)
                writer.log(work)  # the commit: one write(), no fsync
        except Exception as error:  # a full disk, an I/O error, or a bug sealing: diverged
            self._diverge(error, batch)
            return
        finally:
            self._inflight = None
        if writer.inline:
            # (before the answers: a flush returns with everything in SQLite, and an
            # apply on the loop holds the answers back anyway)
            apply_at = writer.apply_at()
            forced, self._apply_forced = self._apply_forced, False
            if applying or forced or (apply_at is not None and apply_at <= time.monotonic()):
                await self._apply(work.now)
        batch.resolve()  # (logged: an apply that failed lost none of it)

    def _check_fits(self, work: Work) -> None:
        """Under the log, what SQLite could not hold must fail now, as its commit would
        have, not at the apply after it was answered (the room is SQLite's: the disk's
        free space, max_page_count, the file-size limit)."""
        writer = self.writer
        # its bytes twice (in the log, then in SQLite while the log still holds them)
        if 2 * estimate_bytes(work) > self._room - writer.logged_bytes - writer.log_file.size:
            raise OSError(errno.ENOSPC, "no room in the data directory for this commit")

    async def _apply(self, now: float) -> None:
        """The logged batches into SQLite (`_apply_now`). A failure diverges as a failed
        commit: the reload applies the log first (nothing logged was lost)."""
        try:
            await self._apply_now(now)
        except Exception as error:
            self._diverge(error, None)

    async def _apply_now(self, now: float, unlogged: Work | None = None) -> None:
        """The logged batches, then `unlogged` (a batch too large for the log), into
        SQLite in one transaction: on the loop, or on the thread with a checkpoint when
        one is due. Raises what the transaction raised."""
        writer = self.writer
        summary = writer.to_apply(now, unlogged)
        if writer.due_checkpoint(summary):
            self._room = await self._run(lambda: writer.apply(summary, unlogged, True))
        else:
            self._room = writer.apply(summary, unlogged)
        self._committed(summary)

    def _committed(self, work: Work) -> None:
        """`work` is in the file: its TTL deletions and its reserved bytes with it."""
        for key in work.expired:  # the file holds none of their blobs now
            for written in self._blobs_written:
                written.pop(key, None)
        self._reserved_applied = max(self._reserved_applied, work.reserved)

    def _seal(self) -> Work:
        """Encode everything marked since the last seal (on the loop: a consistent cut)."""
        codec = self.tables.records
        work = Work(now=self._clock(), reserved=self._reserved)
        upserts: list[list[tuple[Any, bytes]]] = [[] for _ in codec.blobs]
        deletes: list[list[tuple[Any]]] = [[] for _ in codec.blobs]
        written = self._blobs_written
        if sum(len(by_key) for by_key in written) > BLOBS_REMEMBERED:
            written = self._blobs_written = [{} for _ in codec.blobs]
        for key in self._dirty:
            record = self._records.get(key)
            if record is None:
                continue  # dropped from memory (its TTL ran out): the TTL deletes its row
            work.rows.append(codec.row(record))
            for index, value in enumerate(codec.blob_values(record)):
                if isinstance(value, Unloaded):
                    continue  # still on disk, unchanged
                held = written[index].get(key)
                if held is value or (not value and held == b""):
                    continue  # what the file holds already (a claim's payload, no result yet)
                written[index][key] = value
                if value:
                    upserts[index].append((key, value))
                else:
                    deletes[index].append((key,))
        for index, name in enumerate(codec.blobs):
            if upserts[index]:
                work.blobs[name] = upserts[index]
            if deletes[index]:
                work.blob_deletes[name] = deletes[index]
        events = self.tables.events
        work.events = [events.row(event) for event in self._events]
        if self._meta_due():
            self._seal_meta(work)
        self._dirty = {}
        self._events = []
        self._lazy_due = None
        return work

    def _meta_due(self) -> bool:
        """Whether this seal writes the meta values: at most every `lazy_delay` seconds
        (they change with nearly every Submit and claim, and encoding them cost a fifth of a
        small commit), and always when closing or flushing. A start after a crash
        reconciles them with the records (store/memory/durable.py restore)."""
        now = time.monotonic()
        if not (self._closing or self._meta_forced or now >= self._next_meta):
            return False
        self._meta_forced = False
        self._next_meta = now + self.lazy_delay
        return True

    def _seal_meta(self, work: Work) -> None:
        sealed = self._sealed_meta
        for name, value in self._meta().items():
            if sealed.get(name) is value:
                continue  # the very object sealed last time: unchanged (see attach)
            sealed[name] = value
            text = _json(value)
            if self._written_meta.get(name) != text:
                work.meta.append((name, text))
                self._written_meta[name] = text

    def _forget_blobs(self) -> None:
        self._blobs_written = [{} for _ in self.tables.records.blobs]

    def _diverge(self, error: BaseException, batch: _Batch | None) -> None:
        failure = StoreUnavailable(
            f"the data directory could not be written ({error}); the store reloads it"
        )
        for failed in (batch, self._open_batch):
            if failed is not None and not failed.resolved:
                failed.resolve(failure)
        self._open_batch = None
        self._dirty = {}
        self._events = []
        self._lazy_due = None
        self._reserved_applied = self._reserved
        self._forget_blobs()
        self._failure = failure
        self.on_diverged()


async def _yield_while_busy() -> None:
    """Passes of the event loop while callbacks are ready, up to SEAL_YIELDS
    (CPython's loop keeps them in `_ready`; without it, one pass)."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    if ready is None:
        await asyncio.sleep(0)
        return
    for _ in range(SEAL_YIELDS):
        if not ready:
            return
        await asyncio.sleep(0)


_ENCODE = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


def _json(value: Any) -> str:
    return _ENCODE(value)
