"""Drain state shared by every service of one process, and its health reporting.

Shutdown order (see docs/servers.md): health NOT_SERVING -> `start_drain()`
(new calls get UNAVAILABLE SHUTTING_DOWN; long polls and streams return
cleanly) -> wait for in-flight calls up to the grace period -> stop the
gRPC servers -> close the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

from jobgate._race import unless_set

T = TypeVar("T")


class Lifecycle:
    """Whether the process is draining, and how many calls are in flight."""

    def __init__(self) -> None:
        self._draining = asyncio.Event()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def start_drain(self) -> None:
        self._draining.set()

    def enter(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight; False if `timeout` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def unless_draining(self, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
        """Await `awaitable` unless the drain starts first.

        Returns (True, result), or (False, None) when the drain won: then the
        awaitable was cancelled. If the caller is cancelled (the client went
        away) the awaitable is cancelled too, so nothing is left running.
        """
        return await unless_set(self._draining, awaitable)


@dataclass(frozen=True)
class HealthEntry:
    servicer: HealthServicer
    services: Sequence[str]


class HealthBoard:
    """The health servicers of every gRPC server in the process, set together."""

    def __init__(self) -> None:
        self._entries: list[HealthEntry] = []
        self._serving: bool | None = None

    def add(self, servicer: HealthServicer, services: Sequence[str]) -> None:
        self._entries.append(HealthEntry(servicer, ("", *services)))

    async def set_serving(self, serving: bool) -> None:
        self._serving = serving
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for entry in self._entries:
            for service in entry.services:
                await entry.servicer.set(service, status)

    async def shut_down(self) -> None:
        """NOT_SERVING for good: later set_serving calls are ignored by the servicers."""
        for entry in self._entries:
            await entry.servicer.enter_graceful_shutdown()
