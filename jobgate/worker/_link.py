"""The worker's connection state and its retry back-off, shared by its loops."""

from __future__ import annotations

import logging
import random
import time

from jobgate.errors import JobgateError

log = logging.getLogger("jobgate.worker")


class Link:
    """The worker's view of its connection: says once when it is lost and when it is back."""

    def __init__(self) -> None:
        self.lost_since: float | None = None

    def failed(self, error: JobgateError) -> None:
        if self.lost_since is None:
            self.lost_since = time.monotonic()
            log.warning("worker server unreachable (%s); retrying with back-off", error)

    def ok(self) -> None:
        if self.lost_since is not None:
            down = time.monotonic() - self.lost_since
            self.lost_since = None
            log.info("worker server reachable again after %.1fs", down)


def backoff(retry: int, base: float = 0.2, cap: float = 5.0) -> float:
    """Jittered exponential back-off: a random time in [d/2, d]."""
    delay = min(cap, base * 2 ** max(0, retry - 1))
    return random.uniform(delay / 2, delay)
