"""Test helpers: wait on a condition with a deadline, never a bare sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def assert_eventually(
    check: Callable[[], Awaitable[T]],
    timeout: float = 5.0,
    interval: float = 0.02,
    message: str = "condition not met",
) -> T:
    """Retry `check` until it returns a truthy value or raises nothing, then return it.

    `check` may raise AssertionError to say "not yet"; the last one is
    re-raised at the deadline.
    """
    deadline = time.monotonic() + timeout
    last_error: AssertionError | None = None
    while True:
        try:
            value = await check()
            if value:
                return value
        except AssertionError as error:
            last_error = error
        if time.monotonic() >= deadline:
            if last_error is not None:
                raise last_error
            raise AssertionError(f"{message} within {timeout}s")
        await asyncio.sleep(interval)


def wait_until(check: Callable[[], bool], timeout: float = 5.0, message: str = "") -> None:
    """The synchronous twin of assert_eventually for subprocess-level tests."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(message or f"condition not met within {timeout}s")
        time.sleep(0.02)
