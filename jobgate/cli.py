"""The `jobgate` console script: one parser, commands registered by their owners.

Server commands (serve, gateway, worker-server) live in jobgate.serving.commands
and import the server packages only when run, so the client and the worker
daemon stay light.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from jobgate import client_cli, events_cli
    from jobgate.serving import commands as server_commands

    parser = argparse.ArgumentParser(
        prog="jobgate", description="A durable job gateway for GPU work."
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    server_commands.add_commands(subcommands)
    client_cli.add_commands(subcommands)
    events_cli.add_commands(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Every subcommand sets `run`: a function of the parsed args returning the exit code.
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
