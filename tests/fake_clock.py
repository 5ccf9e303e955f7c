"""A clock tests move by hand, with a sleep that waits for it (no wall time passes)."""

from __future__ import annotations

import asyncio


class FakeClock:
    """`clock()` is the time; `await clock.sleep(s)` returns once `advance` passed it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._moved = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        until = self.now + seconds
        while self.now < until:
            moved = self._moved
            await moved.wait()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()
