"""Bulk retry: RetryJob over the jobs a /failed page showed, with visible progress.

A bulk retry runs as a task in the console process (it goes on if the page
is closed) with a few calls at a time, and records each outcome; its page
follows the progress live. Only the session that started one may see it.
Finished runs are kept for an hour, at most `MAX_RUNS` of them.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from jobgate.client import JobClient
from jobgate.errors import JobgateError

#: The most jobs one bulk retry takes (a /failed page shows at most this many).
MAX_JOBS = 500
MAX_RUNS = 100
CONCURRENCY = 8
KEEP_FINISHED_SECONDS = 3600.0


@dataclass
class BulkRetry:
    id: str
    owner: str  # the session id that started it
    job_ids: tuple[str, ...]
    retried: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    finished_at: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def done(self) -> int:
        return self.retried + len(self.failures)

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def progress(self) -> dict[str, object]:
        return {
            "total": len(self.job_ids),
            "done": self.done,
            "retried": self.retried,
            "failures": [{"id": job_id, "error": error} for job_id, error in self.failures],
            "finished": self.finished,
        }

    def notify(self) -> None:
        # Wake the current waiters, and give later ones a fresh event to wait on.
        self.changed.set()
        self.changed = asyncio.Event()


class BulkRetries:
    """The console's bulk retries, by id."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._runs: OrderedDict[str, BulkRetry] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, owner: str, client: JobClient, job_ids: Sequence[str]) -> BulkRetry:
        self._prune()
        unique = tuple(dict.fromkeys(job_ids))[:MAX_JOBS]
        run = BulkRetry(secrets.token_urlsafe(12), owner, unique)
        self._runs[run.id] = run
        task = asyncio.create_task(self._run(run, client), name=f"console-bulk-{run.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    def get(self, run_id: str, owner: str) -> BulkRetry | None:
        run = self._runs.get(run_id)
        return run if run is not None and run.owner == owner else None

    async def _run(self, run: BulkRetry, client: JobClient) -> None:
        slots = asyncio.Semaphore(CONCURRENCY)

        async def retry(job_id: str) -> None:
            async with slots:
                try:
                    await client.retry_job(job_id)
                except JobgateError as error:
                    run.failures.append((job_id, str(error)[:300]))
                else:
                    run.retried += 1
                run.notify()

        try:
            await asyncio.gather(*(retry(job_id) for job_id in run.job_ids))
        finally:
            run.finished_at = self._clock()
            run.notify()

    def _prune(self) -> None:
        now = self._clock()
        for run_id, run in list(self._runs.items()):
            old = run.finished_at is not None and now - run.finished_at > KEEP_FINISHED_SECONDS
            if old or (len(self._runs) >= MAX_RUNS and run.finished):
                del self._runs[run_id]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
