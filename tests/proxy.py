"""A TCP proxy for fault tests, in front of a test redis-server.

It passes bytes through unchanged, except for requests a test armed a fault
for: `drop_reply(match)` lets the next request containing `match` reach
Redis (so the script runs) and then closes the client's connection before
the reply gets through, as a network break would; `delay_reply(match, s)`
holds that request's reply back for `s` seconds. Redis answers the requests
of one connection in order and redis-py waits for each reply before sending
the next command, so the first bytes back after an armed request are its
reply. Faults are one-shot unless `times` says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass
class _Fault:
    match: bytes
    times: int
    delay: float | None  # None: drop the reply (and the connection)
    hits: int = 0


@dataclass
class _Link:
    """One client connection and its connection to Redis."""

    armed: list[_Fault] = field(default_factory=list)  # faults for the replies due


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._faults: list[_Fault] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    def drop_reply(self, match: bytes, times: int = 1) -> _Fault:
        """The next `times` requests containing `match` run; their replies never arrive."""
        fault = _Fault(match, times, None)
        self._faults.append(fault)
        return fault

    def delay_reply(self, match: bytes, seconds: float, times: int = 1) -> _Fault:
        """The next `times` requests containing `match` run; their replies wait `seconds`."""
        fault = _Fault(match, times, seconds)
        self._faults.append(fault)
        return fault

    def _take_fault(self, chunk: bytes) -> _Fault | None:
        for fault in self._faults:
            if fault.match in chunk and fault.hits < fault.times:
                fault.hits += 1
                return fault
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        link = _Link()
        tasks = [
            asyncio.create_task(self._requests(link, reader, up_writer)),
            asyncio.create_task(self._replies(link, up_reader, writer)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)
            for stream in (writer, up_writer):
                stream.close()

    async def _requests(
        self, link: _Link, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
    ) -> None:
        while chunk := await reader.read(65536):
            fault = self._take_fault(chunk)
            if fault is not None:
                link.armed.append(fault)
            up_writer.write(chunk)
            await up_writer.drain()

    async def _replies(
        self, link: _Link, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while chunk := await up_reader.read(65536):
            if link.armed:
                fault = link.armed.pop(0)
                if fault.delay is None:
                    return  # the script ran; the client never hears of it
                await asyncio.sleep(fault.delay)
            writer.write(chunk)
            await writer.drain()
