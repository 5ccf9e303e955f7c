"""Serving the console: uvicorn on a socket we bind, inside the caller's event loop.

    server = ConsoleServer(settings)
    port = await server.start()     # bound (port 0 picks a free one)
    ...
    await server.stop()             # feeds end, connections close, clients close

`run_console(settings)` does both around "until cancelled", for `jobgate
console` and for `jobgate serve --console-listen` (which runs it beside the
gRPC servers in the same loop). uvicorn's own signal handling is turned off:
the process that embeds the console owns SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator

import uvicorn

from jobgate.console.app import build_app
from jobgate.console.gateway import Gateway
from jobgate.console.settings import ConsoleSettings
from jobgate.console.state import Console

log = logging.getLogger("jobgate.console")
#: How long open event streams may take to close at stop.
STOP_GRACE_SECONDS = 2.0


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The embedding process handles signals; uvicorn must not replace its handlers.
        yield


class ConsoleServer:
    """The console's HTTP(S) server, started and stopped by its owner."""

    def __init__(self, settings: ConsoleSettings, gateway: Gateway | None = None) -> None:
        self.settings = settings
        self.app = build_app(settings, gateway)
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            ssl_certfile=settings.tls_cert,
            ssl_keyfile=settings.tls_key,
            timeout_graceful_shutdown=int(STOP_GRACE_SECONDS),
            # Behind a TLS proxy the client's address comes from it; we read none of it.
            proxy_headers=False,
            server_header=False,
        )
        self._server = _EmbeddedServer(config)
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def console(self) -> Console:
        console: Console = self.app.state.console
        return console

    async def start(self) -> int:
        """Bind and serve; returns the bound port. Raises OSError if it cannot bind."""
        listen = self.settings.listen
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        # IPPROTO_TCP named, so asyncio sets TCP_NODELAY on each accepted socket (it
        # checks the protocol): without it a response's head and body, written
        # apart, wait out the client's delayed ACK (~40 ms a request).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listen.host, listen.port))
        except OSError:
            sock.close()
            raise
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="console")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the console stopped while starting")
            await asyncio.sleep(0.01)
        return self.port

    @property
    def url(self) -> str:
        scheme = "https" if self.settings.tls_cert else "http"
        host = self.settings.listen.host
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{self.port}"

    async def stop(self) -> None:
        """End the live streams, stop serving, and close the gateway clients."""
        if self._task is None:
            return
        await self.console.hub.close()
        self._server.should_exit = True
        await self._task
        self._task = None


async def run_console(
    settings: ConsoleSettings, *, ready: Callable[[ConsoleServer], None] | None = None
) -> None:
    """Serve the console until cancelled; `ready(server)` once it listens."""
    server = ConsoleServer(settings)
    await server.start()
    log.info("console on %s (gateway %s)", server.url, settings.gateway.target)
    if ready is not None:
        ready(server)
    try:
        await asyncio.Event().wait()
    finally:
        await asyncio.shield(server.stop())
