"""The event loop jobgate's long-running processes run on: uvloop where it is installed.

Measured on the benchmark (docs/worker-fast-path.md, "The event loop"):
uvloop takes about a quarter off each server's and the worker daemon's CPU
per job, the part asyncio's own loop and transports cost. Set
JOBGATE_EVENT_LOOP=asyncio to run on the standard loop instead (to compare,
or to debug with asyncio's debug mode).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

ENVIRONMENT = "JOBGATE_EVENT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop, unless JOBGATE_EVENT_LOOP=asyncio or uvloop is not installed."""
    if os.environ.get(ENVIRONMENT, "uvloop") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # not built for this platform (Windows): the standard loop
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on the loop `loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
