"""The server commands: `jobgate serve`, `jobgate gateway`, `jobgate worker-server`.

Every command accepts every server setting (flag or JOBGATE_<NAME>); one it
does not use is accepted and ignored. A bad value or a store that cannot be
opened is one line on stderr and a non-zero exit (2 for usage, 1 for start).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jobgate.serving import settings as server_settings

_COMMANDS = {
    "serve": "run JobService and WorkerService in one process (embedded store unless --redis-url)",
    "gateway": "run JobService on --listen against --redis-url",
    "worker-server": "run WorkerService on --listen against --redis-url",
}
EXIT_USAGE = 2
EXIT_START = 1


def add_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    for name, description in _COMMANDS.items():
        parser = subcommands.add_parser(name, help=description, description=description)
        server_settings.add_flags(parser)
        parser.set_defaults(run=_runner(name))


def _runner(command: str) -> Any:
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
    if command != "serve" and settings.redis_url is None:
        _error(command, "--redis-url (or JOBGATE_REDIS_URL) is required")
        return EXIT_USAGE
    # Imported late: the client and worker commands never load the servers.
    from jobgate.serving import logs, runner

    logs.configure(settings.log_format, settings.log_level)
    try:
        return runner.run_command(command, settings)
    except runner.StartError as error:
        _error(command, str(error))
        return EXIT_START
    except KeyboardInterrupt:
        return EXIT_START
