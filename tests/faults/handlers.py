"""The fault suite's worker handler: does what the payload says, and writes the ledger.

`jobgate worker --handler tests.faults.handlers:ledger` runs it. Each run
appends a `start` line before any work and an `end` line after it to the
JSONL file named by FAULTS_LEDGER, so an attempt cut short by SIGKILL shows
as a start without an end. Lines are written with one O_APPEND write each,
well under PIPE_BUF, so the lines of concurrent workers never interleave.

Payload (JSON, every field optional):
  {"sleep": seconds of work, "mode": "ok" | "poison" | "forever" | "retry_once"}
- poison: the handler kills its own worker process, every attempt;
- forever: runs (heartbeating) until the job is cancelled or its lease lost;
- retry_once: the first attempt raises RetryableError.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from jobgate.errors import RetryableError
from jobgate.worker import JobContext

LEDGER_ENV = "FAULTS_LEDGER"
STEP = 0.05


def append(entry: dict[str, Any]) -> None:
    """One line, one write, to the ledger file."""
    line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _work(ctx: JobContext, seconds: float) -> None:
    """Sleep in steps (wall clock), stopping early once cancelled or the lease is lost."""
    deadline = time.time() + seconds
    while not ctx.cancelled and time.time() < deadline:
        ctx.cancel_event.wait(min(STEP, max(0.0, deadline - time.time())))


def ledger(ctx: JobContext) -> bytes:
    spec: dict[str, Any] = json.loads(ctx.payload) if ctx.payload else {}
    mode = str(spec.get("mode", "ok"))
    base = {
        "job_id": ctx.job_id,
        "attempt": ctx.attempt,
        "lease_id": ctx.lease_id,
        "worker_id": ctx.worker_id,
    }
    append({**base, "event": "start", "time": time.time()})
    outcome = "completed"
    try:
        if mode == "poison":
            # Close the attempt first: the process dies with no finally to run.
            append({**base, "event": "end", "time": time.time(), "outcome": "poison"})
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "forever":
            while not ctx.cancelled:
                ctx.cancel_event.wait(STEP)
        else:
            _work(ctx, float(spec.get("sleep", 0.0)))
        if ctx.cancelled:
            outcome = "stopped"
        elif mode == "retry_once" and ctx.attempt == 1:
            outcome = "retry"
            raise RetryableError("first attempt asks for a retry", error_code="TRY_AGAIN")
        return json.dumps(base).encode()
    finally:
        append({**base, "event": "end", "time": time.time(), "outcome": outcome})
