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
import sys
from collections.abc import Callable
from typing import Any, TextIO

from gateway_server.server import build_server as build_gateway
from jobgate.cli import SERVER_COMMANDS
from serving import logs, runner
from serving import settings as server_settings
from serving.runner import Builder, Process
from serving.settings import ServerSettings
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
    return Process(command, settings, builders(command, settings), out, install_signals)


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
