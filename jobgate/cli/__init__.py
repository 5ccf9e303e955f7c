"""The `jobgate` console script: one parser, commands registered by their owners.

Client commands (submit, get, watch, cancel, worker) live in `_client`. The
server commands (serve, gateway, worker-server) live in `_servers`, and
`events` (which reads the store's audit trail) in `_events`; each of those two
is imported only when one of its commands runs: they load the store and Redis
(`_servers` the servers too), none of which a client or a worker daemon needs.
`console` lives in `_console`, imported only when it runs too (it leads to the
web stack).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

#: The commands `_servers` registers, with their one-line help.
SERVER_COMMANDS = {
    "serve": "run JobService and WorkerService in one process (embedded store unless --redis-url)",
    "gateway": "run JobService on --listen against --redis-url",
    "worker-server": "run WorkerService on --listen against --redis-url",
}
CONSOLE_COMMAND = "console"
CONSOLE_HELP = "serve the web console (jobs, queues, workers) for a JobService"
#: The command `_events` registers, and its one-line help.
EVENTS, EVENTS_HELP = "events", "print the audit trail of job status transitions"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`; a server command's flags are added only when it is chosen."""
    from jobgate.cli import _client

    parser = argparse.ArgumentParser(
        prog="jobgate", description="A durable job gateway for GPU work."
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen_command(sys.argv[1:] if argv is None else argv)
    if chosen in SERVER_COMMANDS:
        from jobgate.cli import _servers

        _servers.add_commands(subcommands)
    else:
        _add_placeholders(subcommands, SERVER_COMMANDS)
    if chosen == EVENTS:
        from jobgate.cli import _events

        _events.add_command(subcommands, EVENTS_HELP)
    else:
        _add_placeholders(subcommands, {EVENTS: EVENTS_HELP})
    _client.add_commands(subcommands)
    if chosen == CONSOLE_COMMAND:
        from jobgate.cli import _console

        _console.add_command(subcommands)
    else:
        subcommands.add_parser(CONSOLE_COMMAND, help=CONSOLE_HELP, description=CONSOLE_HELP)
    return parser


def _add_placeholders(
    subcommands: argparse._SubParsersAction[Any], commands: dict[str, str]
) -> None:
    """List commands by name and help line only; their module is not loaded."""
    for name, description in commands.items():
        subcommands.add_parser(name, help=description, description=description)


def _chosen_command(argv: Sequence[str]) -> str | None:
    # The top-level parser has no options but --help, so the command is the
    # first word that is not an option.
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    # Every subcommand sets `run`: a function of the parsed args returning the exit code.
    code: int = args.run(args)
    return code
