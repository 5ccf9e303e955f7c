"""Timing one call again and again: the samples the percentiles are read from."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable


async def timed(calls: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    """Seconds each of `calls` sequential awaits of `call()` took."""
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples
