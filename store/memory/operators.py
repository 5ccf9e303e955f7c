"""LocalEngine's operator calls, ListJobs and RetryJob, beside its transitions.

A base of LocalEngine (store/memory/engine.py) so the engine class stays
small: each call checks the store is open, runs whole on the event loop
(no await inside), and wakes the waiters of what it changed.
"""

from __future__ import annotations

from collections.abc import Iterable

from store.memory import listing, redrive
from store.memory.state import State
from store.model import Job, JobFilter, JobPage, ListCursor


class Operators:
    """list_jobs and retry_job over the engine's `state`."""

    state: State

    def _check_open(self) -> None:
        raise NotImplementedError  # LocalEngine's

    def _wake(self, *job_ids: str) -> None:
        raise NotImplementedError  # LocalEngine's

    async def _finished_loaded(self, job_ids: Iterable[str] = (), *, every: bool = False) -> None:
        # LocalEngine's, which also takes idempotency keys; only ids and every are used here
        raise NotImplementedError

    async def list_jobs(
        self, tenant: str | None, query: JobFilter, after: ListCursor | None, page_size: int
    ) -> JobPage:
        await self._finished_loaded(every=True)
        self._check_open()
        return listing.list_jobs(self.state, tenant, query, after, page_size)

    async def retry_job(self, tenant: str | None, job_id: str, actor: str = "") -> Job:
        await self._finished_loaded([job_id])
        self._check_open()
        record = self.state.visible_record(tenant, job_id)
        with self.state.acting(actor):
            redrive.retry(self.state, record, self.state.clock())
        self._wake()
        return self.state.snapshot(record)
