"""A TCP proxy in front of redis-server that loses script replies.

The servers connect to Redis through it. While `every` is set, one request
in `every` containing EVALSHA is passed on (so Redis runs the script) and
the connection is then closed before its reply gets back, as a network
break would. Redis answers one connection's requests in order and redis-py
waits for each reply, so the first bytes back after that request are its
reply. The proxy runs its own event loop on a thread, so a test blocked in
a subprocess wait never stalls the servers' Redis traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class ReplyDroppingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        #: Drop the reply of one EVALSHA in this many (0: pass everything).
        self.every = 0
        self.dropped = 0
        self._seen = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        future.result(timeout=10)

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        # Closed here, not by the garbage collector: an unclosed loop (and its
        # self-pipe sockets) would warn in whichever later test collects it.
        self._loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def _arm(self, chunk: bytes) -> bool:
        if not self.every or b"EVALSHA" not in chunk.upper():
            return False
        self._seen += 1
        return self._seen % self.every == 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        armed = asyncio.Event()
        tasks = [
            asyncio.create_task(self._requests(reader, up_writer, armed)),
            asyncio.create_task(self._replies(up_reader, writer, armed)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for stream in (writer, up_writer):
                with contextlib.suppress(Exception):
                    stream.close()

    async def _requests(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, armed: asyncio.Event
    ) -> None:
        while chunk := await reader.read(65536):
            if self._arm(chunk):
                armed.set()
            up_writer.write(chunk)
            await up_writer.drain()

    async def _replies(
        self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, armed: asyncio.Event
    ) -> None:
        while chunk := await up_reader.read(65536):
            if armed.is_set():
                self.dropped += 1
                return  # the script ran; the server never hears of it
            writer.write(chunk)
            await writer.drain()
