"""What every client command shares: how it is declared (`client_command`:
its parser, connection flags and `run`), exit codes, running one command
against a JobClient, errors as one line, JSON output.

Exit codes: 0 success; 1 a job ended FAILED, CANCELLED or PARTIAL (watch,
submit --wait) or retry had a job refused; 2 bad usage or input; 3 the
server refused the call or could not be reached; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TextIO

from google.protobuf import json_format
from google.protobuf.message import Message

from jobgate.client import JobClient
from jobgate.errors import JobgateError

EXIT_OK = 0
EXIT_JOB_NOT_COMPLETED = 1
#: `retry`: at least one job was refused (the same code as a job that ended badly).
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_RPC = 3
EXIT_INTERRUPTED = 130

Command = Callable[[argparse.Namespace, JobClient], Coroutine[Any, Any, int]]


class UsageError(Exception):
    """Bad input found after parsing (unreadable file, malformed group, ...)."""


@contextlib.contextmanager
def client_command(
    subcommands: argparse._SubParsersAction[Any],
    name: str,
    command: Command,
    *,
    help: str,
    job_id: bool = False,
) -> Iterator[argparse.ArgumentParser]:
    """Declare a command that runs against a JobService, the way all of them are.

    `help` is its line in `jobgate --help`; its own --help describes it with
    `command`'s docstring (none: no description; argparse folds the docstring's
    lines into paragraphs, as it does any description). The parser, with the
    positional ID when `job_id`, is given to the block, which adds the
    command's own flags; the connection flags come after them, last in usage
    and help, and `run` is set to `command`.
    """
    parser = subcommands.add_parser(name, help=help, description=command.__doc__)
    if job_id:
        parser.add_argument("job_id", metavar="ID")
    yield parser
    connection_flags(parser)
    parser.set_defaults(run=run(command))


def json_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """`--json`: machine-readable output, described by `help`."""
    parser.add_argument("--json", action="store_true", help=help)


def connection_flags(parser: argparse.ArgumentParser) -> None:
    """--target, --token, --tenant, --timeout and the TLS files of a client command."""
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--target",
        help="JobService address HOST:PORT (env JOBGATE_TARGET, default 127.0.0.1:50051)",
    )
    group.add_argument("--token", help="bearer token (env JOBGATE_TOKEN)")
    group.add_argument("--tenant", help="tenant for servers in open mode (env JOBGATE_TENANT)")
    group.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="deadline in seconds for each call, retries included (default 30); "
        "for watch and --wait, the longest time to wait (default: no limit)",
    )
    group.add_argument("--tls-ca", metavar="FILE", help="PEM CA of the server's certificate")
    group.add_argument("--tls-cert", metavar="FILE", help="PEM client certificate (mutual TLS)")
    group.add_argument("--tls-key", metavar="FILE", help="PEM client key (mutual TLS)")


def run(command: Command) -> Callable[[argparse.Namespace], int]:
    """The `run` of a parser: `command` with a client built from the flags, errors as exit codes."""

    def run_command(args: argparse.Namespace) -> int:
        try:
            return asyncio.run(_with_client(command, args))
        except UsageError as error:
            return fail(str(error), EXIT_USAGE)
        except JobgateError as error:
            return fail(str(error), EXIT_RPC)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED

    return run_command


async def _with_client(command: Command, args: argparse.Namespace) -> int:
    try:
        client = JobClient(
            args.target,
            token=args.token,
            tenant=args.tenant,
            tls_ca=args.tls_ca,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            timeout=30.0 if args.timeout is None else args.timeout,
        )
    except (OSError, ValueError) as error:
        raise UsageError(str(error)) from error
    async with client:
        return await command(args, client)


def fail(message: str, code: int) -> int:
    """Print one error line on stderr and return `code`."""
    print(f"jobgate: error: {message}", file=sys.stderr)
    return code


def message_dict(message: Message) -> dict[str, Any]:
    """A message in the protobuf JSON mapping, with the proto's field names."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def print_object(data: dict[str, Any], out: TextIO | None = None) -> None:
    """One JSON object on one line."""
    print(json.dumps(data, sort_keys=True), file=out or sys.stdout, flush=True)


def print_json(message: Message, out: TextIO | None = None) -> None:
    """One message as one line of JSON."""
    print_object(message_dict(message), out)
