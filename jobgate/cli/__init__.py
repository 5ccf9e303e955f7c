"""The `jobgate` console script: one parser, commands registered by their owners.

Client commands (submit, get, watch, cancel, worker) live in `_client`. The
server commands (serve, gateway, worker-server, events) live in `_servers`,
which is imported only when one of them runs: it loads the servers, the store
and Redis, none of which a client or a worker daemon needs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

#: The commands `_servers` registers, with their one-line help.
SERVER_COMMANDS = {
    "serve": "run JobService and WorkerService in one process (embedded store unless --redis-url)",
    "gateway": "run JobService on --listen against --redis-url",
    "worker-server": "run WorkerService on --listen against --redis-url",
    "events": "print the audit trail of job status transitions",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`; a server command's flags are added only when it is chosen."""
    from jobgate.cli import _client

    parser = argparse.ArgumentParser(
        prog="jobgate", description="A durable job gateway for GPU work."
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if _chosen_command(sys.argv[1:] if argv is None else argv) in SERVER_COMMANDS:
        from jobgate.cli import _servers

        _servers.add_commands(subcommands)
    else:
        for name, description in SERVER_COMMANDS.items():
            subcommands.add_parser(name, help=description, description=description)
    _client.add_commands(subcommands)
    return parser


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
