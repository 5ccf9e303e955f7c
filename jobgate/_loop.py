"""The event loop every jobgate process runs on: uvloop where it is installed.

uvloop (libuv) runs the same asyncio programs with less CPU per callback; the
benchmark measured 15-25% less CPU per job for the servers and the worker
daemon. Where it is missing (an unsupported platform) asyncio's own loop runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on uvloop when available."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - every supported platform has it
        return asyncio.run(main)
    return uvloop.run(main)
