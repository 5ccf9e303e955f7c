"""Retries with jittered exponential back-off that honour the server's RetryInfo.

Only UNAVAILABLE, CANCELLED and RESOURCE_EXHAUSTED are retried. UNAVAILABLE
means the call never took effect or is safe to repeat (every JobService call
is idempotent once Submit carries a key). CANCELLED reaches a caller as an
RpcError only from the other side (its own cancel is asyncio.CancelledError):
a server shutting down cancels the calls its transport had taken but not yet
started (gRPC core's shutdown), which happens to a few calls of every
rolling restart; repeating one is as safe as after UNAVAILABLE.
RESOURCE_EXHAUSTED is an admission cap that a wait may lift. The whole
sequence of attempts stays inside one deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from jobgate.errors import DeadlineExceededError, JobgateError, error_from_rpc

log = logging.getLogger("jobgate.client")

T = TypeVar("T")

RETRY_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a call is retried.

    `max_attempts` counts every try, the first included (1 = never retry).
    The n-th retry waits a random time in [d/2, d] with
    d = min(max_backoff, initial_backoff * multiplier**(n-1)); a RetryInfo
    delay from the server is a floor (plus up to 10 % jitter).
    """

    max_attempts: int = 5
    initial_backoff: float = 0.2
    max_backoff: float = 10.0
    multiplier: float = 2.0
    retry_codes: frozenset[grpc.StatusCode] = field(default=RETRY_CODES)

    def delay(self, retry: int, server_delay: float | None = None) -> float:
        """Seconds to wait before retry number `retry` (1-based)."""
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        delay = random.uniform(cap / 2, cap)
        if server_delay is not None and server_delay > 0:
            delay = max(delay, server_delay * random.uniform(1.0, 1.1))
        return delay


NO_RETRY = RetryPolicy(max_attempts=1)

Sleep = Callable[[float], Awaitable[None]]


async def call_with_retry(
    attempt: Callable[[float | None], Awaitable[T]],
    *,
    policy: RetryPolicy,
    timeout: float | None,
    sleep: Sleep = asyncio.sleep,
    what: str = "call",
) -> T:
    """Run `attempt(remaining_seconds)` until it succeeds, fails for good or time runs out.

    `timeout` bounds the whole sequence (None: no deadline). A back-off that
    would end past the deadline is not slept: the last error is raised at once.
    Raises the typed JobgateError of the last failure.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    tries = 0
    while True:
        tries += 1
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            raise DeadlineExceededError(f"{what}: deadline of {timeout}s exceeded")
        try:
            return await attempt(remaining)
        except grpc.RpcError as rpc_error:
            error = error_from_rpc(rpc_error)
            if not _should_retry(error, policy, tries):
                raise error from rpc_error
            delay = policy.delay(tries, error.retry_delay)
            if deadline is not None and loop.time() + delay >= deadline:
                raise error from rpc_error
            log.debug("%s failed (%s); retry %d in %.2fs", what, error, tries, delay)
            await sleep(delay)


def _should_retry(error: JobgateError, policy: RetryPolicy, tries: int) -> bool:
    return error.code in policy.retry_codes and tries < policy.max_attempts
