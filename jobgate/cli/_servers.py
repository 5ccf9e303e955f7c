"""The server commands: `jobgate serve | gateway | worker-server`.

The one module of the `jobgate` package that loads the servers, their shared
plumbing (`serving`), the store and Redis; `jobgate.cli` imports it only when
one of these commands runs. It composes: `serve` is both services over one
store, `gateway` JobService alone and `worker-server` WorkerService alone.

Every server command accepts every server setting (flag or JOBGATE_<NAME>);
one it does not use is accepted and ignored. A bad value or a store that
cannot be opened is one line on stderr and a non-zero exit (2 for usage, 1
for start).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TextIO

from gateway_server.server import build_server as build_gateway
from jobgate.cli import SERVER_COMMANDS
from serving import logs, runner
from serving import settings as server_settings
from serving.runner import Builder, Process, StartError
from serving.settings import Address, ServerSettings
from worker_server.server import build_server as build_worker

SERVE, GATEWAY, WORKER_SERVER = "serve", "gateway", "worker-server"
EXIT_USAGE = 2
EXIT_START = 1


def add_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    for name in (SERVE, GATEWAY, WORKER_SERVER):
        description = SERVER_COMMANDS[name]
        parser = subcommands.add_parser(name, help=description, description=description)
        server_settings.add_flags(parser)
        parser.set_defaults(run=_runner(name))


def builders(command: str, settings: ServerSettings) -> list[Builder]:
    """The services `command` runs, each with the address it listens on."""
    if command == SERVE:
        return [
            Builder("job", build_gateway, settings.listen),
            Builder("worker", build_worker, settings.worker_listen),
        ]
    if command == GATEWAY:
        return [Builder("job", build_gateway, settings.listen)]
    return [Builder("worker", build_worker, settings.listen)]


def process(
    command: str,
    settings: ServerSettings,
    out: TextIO | None = None,
    install_signals: bool = True,
) -> Process:
    """One server process for `command` (tests run it in-process)."""
    sidecars = [_console] if command == SERVE and settings.console_listen is not None else []
    return Process(command, settings, builders(command, settings), out, install_signals, sidecars)


@contextlib.asynccontextmanager
async def _console(process: Process) -> AsyncIterator[object]:
    """`serve --console-listen`: the web console in this process, a client of its JobService.

    With --auth-file it asks people to sign in with their auth-file token and
    calls with it (the same login settings as the gateway's); the console
    refuses, as `jobgate console` does, to listen beyond loopback without a
    login and TLS.
    """
    settings = process.settings
    from jobgate.client import ConnectionConfig
    from jobgate.console.settings import INSTALL_HINT, AuthMode, ConsoleSettings, Listen
    from jobgate.console.settings import SettingsError as ConsoleSettingsError

    try:
        from jobgate.console.server import ConsoleServer
    except ImportError as error:
        raise StartError(f"--console-listen needs the console extra: {INSTALL_HINT}") from error
    if settings.tls_client_ca is not None:
        raise StartError("--console-listen cannot be used with --tls-client-ca (mutual TLS)")
    job = next(listener.address for listener in process.listeners if listener.name == "job")
    host = "127.0.0.1" if job.host in ("0.0.0.0", "") else "::1" if job.host == "::" else job.host
    tls_ca = (
        await asyncio.to_thread(Path(settings.tls_cert).read_bytes) if settings.tls_cert else None
    )
    listen = settings.console_listen
    assert listen is not None
    try:
        console = ConsoleSettings(
            gateway=ConnectionConfig(target=str(Address(host, job.port)), tls_ca=tls_ca),
            listen=Listen(listen.host, listen.port),
            auth=AuthMode.TOKEN if settings.auth_file else AuthMode.NONE,
            tls_cert=settings.tls_cert,
            tls_key=settings.tls_key,
        )
    except ConsoleSettingsError as error:
        raise StartError(f"--console-listen: {error}") from None
    server = ConsoleServer(console)
    try:
        port = await server.start()
    except OSError as error:
        raise StartError(f"cannot serve the console on {listen}: {error.strerror}") from None
    process.announced["console"] = Address(listen.host, port)
    try:
        yield server
    finally:
        await server.stop()


def _runner(command: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return main(command, args)

    return run


def _error(command: str, message: str) -> None:
    print(f"jobgate {command}: error: {message}", file=sys.stderr, flush=True)


def main(command: str, args: argparse.Namespace) -> int:
    try:
        settings = server_settings.from_args(args)
    except server_settings.SettingsError as error:
        _error(command, str(error))
        return EXIT_USAGE
    if command != SERVE and settings.redis_url is None:
        _error(command, "--redis-url (or JOBGATE_REDIS_URL) is required")
        return EXIT_USAGE
    logs.configure(settings.log_format, settings.log_level)
    try:
        return asyncio.run(process(command, settings).run())
    except runner.StartError as error:
        _error(command, str(error))
        return EXIT_START
    except KeyboardInterrupt:
        return EXIT_START
