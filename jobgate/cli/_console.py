"""`jobgate console`: the web console, a JobService client serving HTML.

Its flags need the standard library only; the web stack (the `console`
extra: Starlette, uvicorn, Jinja2) is imported when the console starts, and
its absence is one line naming the install command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import signal
import sys
from typing import Any

from jobgate._logs import configure
from jobgate.cli import CONSOLE_HELP
from jobgate.console import settings as console_settings
from jobgate.console.passwords import USER_NAME, hash_password

EXIT_START = 1
EXIT_USAGE = 2
DESCRIPTION = CONSOLE_HELP
#: The modules of the `console` extra (what a missing one is reported as).
EXTRA_MODULES = frozenset({"starlette", "uvicorn", "jinja2", "markupsafe", "anyio", "h11"})


def add_command(subcommands: argparse._SubParsersAction[Any]) -> None:
    parser = subcommands.add_parser("console", help=DESCRIPTION, description=DESCRIPTION)
    console_settings.add_flags(parser)
    parser.set_defaults(run=main)


def _error(message: str) -> None:
    print(f"jobgate console: error: {message}", file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    if args.hash_password:
        return _print_hash(args.hash_password)
    try:
        settings = console_settings.from_args(args)
    except console_settings.SettingsError as error:
        _error(str(error))
        return EXIT_USAGE
    try:
        from jobgate.console.server import run_console
    except ImportError as error:
        if (error.name or "").split(".")[0] not in EXTRA_MODULES:
            raise
        _error(f"the console needs the console extra: {console_settings.INSTALL_HINT}")
        return EXIT_START
    configure("text", "info")

    def announce(server: Any) -> None:
        print(f"jobgate console: serving {server.url} for {settings.gateway.target}", flush=True)

    async def serve() -> None:
        # SIGTERM ends the console as Ctrl-C does: streams end, clients close.
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await run_console(settings, ready=announce)

    try:
        asyncio.run(serve())
    except OSError as error:
        _error(f"cannot listen on {settings.listen}: {error.strerror or error}")
        return EXIT_START
    except KeyboardInterrupt:
        return 0
    return 0


def _print_hash(name: str) -> int:
    if not USER_NAME.fullmatch(name):
        _error("a user name is letters, digits and . _ @ - (at most 64)")
        return EXIT_USAGE
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != password:
            _error("the passwords differ")
            return EXIT_USAGE
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        _error("empty password")
        return EXIT_USAGE
    print(f"{name}:{hash_password(password)}")
    return 0
