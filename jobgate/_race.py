"""Await something unless an event comes first: the one race the worker
daemon (its stop), the servers (their drain) and `jobgate events --follow`
(SIGINT) each run.

The loser is cancelled and awaited, so nothing is left running, and a
cancelled caller cancels the awaitable too. The awaitable's own error is
raised to the caller; an error it raises only because it was cancelled (the
exceptions in `quiet`, besides CancelledError) is not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def unless_set(
    event: asyncio.Event,
    awaitable: Awaitable[T],
    *,
    quiet: tuple[type[BaseException], ...] = (),
) -> tuple[bool, T | None]:
    """(True, result) of `awaitable`, or (False, None) when `event` was set first."""
    work = asyncio.ensure_future(awaitable)
    stopped = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, *quiet):
                await work
    if work.cancelled():
        return False, None
    return True, work.result()
