"""JobContext: what a worker handler receives for one claimed job.

DESIGN.md's handler contract: `job_id`, `model`, `payload`, `content_type`,
`labels`, `attempt`, `report(progress, stage="")` and `cancelled`. The daemon
reads the latest report on its own event loop (the heartbeat never runs on
the handler's thread) and sets the cancellation flag when the gateway asks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from jobgate.errors import JobCancelledError
from jobgate.v1 import job_pb2
from jobgate.v1.limits import MAX_STAGE_BYTES, clip_utf8


class JobContext:
    """One claimed job, as its handler sees it. Safe to use from any thread."""

    def __init__(
        self,
        job: job_pb2.Job,
        payload: bytes,
        *,
        lease_id: str = "",
        worker_id: str = "",
        on_report: Callable[[], None] | None = None,
    ) -> None:
        self.job = job
        self.job_id: str = job.id
        self.model: str = job.model
        self.payload: bytes = payload
        self.content_type: str = job.content_type
        self.labels: dict[str, str] = dict(job.labels)
        #: 1 on the first attempt, 2 on the first retry, ...
        self.attempt: int = job.attempts
        self.lease_id = lease_id
        self.worker_id = worker_id
        #: Content type stored with the result; set it before returning
        #: (default: text/plain for a str result, application/octet-stream for bytes).
        self.result_content_type: str = ""
        #: Set once the gateway asks to cancel (or the lease is lost); a sync
        #: handler may `ctx.cancel_event.wait(seconds)` instead of sleeping.
        self.cancel_event = threading.Event()
        self._async_cancel = asyncio.Event()
        self._lock = threading.Lock()
        self._progress = 0.0
        self._stage = ""
        self._on_report = on_report

    @property
    def cancelled(self) -> bool:
        """True once the gateway asked to cancel this job or its lease was lost."""
        return self.cancel_event.is_set()

    def report(self, progress: float, stage: str = "") -> None:
        """Record progress (0..1, clamped) and optionally the current stage.

        Cheap and non-blocking: the daemon sends only the latest values with
        its next heartbeat. An empty `stage` keeps the previous stage; a stage
        is cut to 128 UTF-8 bytes.
        """
        value = min(1.0, max(0.0, float(progress)))
        with self._lock:
            self._progress = value
            if stage:
                # The server refuses a longer stage, and with it the heartbeat
                # that keeps the lease: cut it instead.
                self._stage = clip_utf8(stage, MAX_STAGE_BYTES)
        if self._on_report is not None:
            self._on_report()

    def check_cancelled(self) -> None:
        """Raise JobCancelledError if the job was cancelled: a one-line exit point."""
        if self.cancelled:
            raise JobCancelledError(f"job {self.job_id} was cancelled", reason="JOB_CANCELLED")

    async def wait_cancelled(self) -> None:
        """For async handlers: return once the job is cancelled."""
        await self._async_cancel.wait()

    @property
    def progress(self) -> tuple[float, str]:
        """The latest reported (progress, stage)."""
        with self._lock:
            return self._progress, self._stage

    def _cancel(self) -> None:
        """Called by the daemon on its event loop."""
        self.cancel_event.set()
        self._async_cancel.set()
