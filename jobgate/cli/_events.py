"""`jobgate events`: read the store's audit stream (every job status transition).

A server-side command like `_servers` (it opens the store, hence Redis), so
`jobgate.cli` imports it only when `events` is the command; unlike `_servers`
it loads no server.

The stream lives in Redis, read with --redis-url or JOBGATE_REDIS_URL and the
deployment's --redis-partition and --redis-partitions (every partition's
stream is read, merged in time order); or in the data directory of a
`jobgate serve --data-dir DIR`, read with --data-dir DIR (read-only, also
while serve runs). An in-memory `jobgate serve` keeps its events out of reach.

Without --follow it prints every event the (capped) stream still holds and
exits; with --follow it then waits for new ones until SIGINT or SIGTERM, and
exits 0. --job ID keeps the events of that job and, for a group, of its
children (their parent_job_id is ID).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TextIO

from jobgate._race import unless_set
from serving.settings import parse_partitions
from store import StoreError, open_store
from store.model import JobEvent

PAGE_SIZE = 500
# How long one blocking read waits; a stop signal interrupts it at once.
FOLLOW_BLOCK = timedelta(seconds=5)

EXIT_OK = 0
EXIT_STORE_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class EventSource(Protocol):
    """What this command reads: a Store, or a data directory's EventReader."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...

    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[JobEvent]: ...


def add_command(subcommands: argparse._SubParsersAction[Any], help_line: str) -> None:
    """Register `jobgate events`."""
    parser = subcommands.add_parser(
        "events",
        help=help_line,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new events until interrupted"
    )
    parser.add_argument("--job", metavar="ID", help="only this job (and a group's children)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("JOBGATE_REDIS_URL"),
        help="the deployment's Redis (default: $JOBGATE_REDIS_URL)",
    )
    parser.add_argument(
        "--redis-partition",
        default=os.environ.get("JOBGATE_REDIS_PARTITION", "default"),
        metavar="NAME",
        help="the deployment's key partition (default: $JOBGATE_REDIS_PARTITION or 'default')",
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("JOBGATE_DATA_DIR"),
        metavar="DIR",
        help="read the audit trail of `jobgate serve --data-dir DIR` instead of Redis "
        "(default: $JOBGATE_DATA_DIR)",
    )
    parser.add_argument(
        "--redis-partitions",
        default=os.environ.get("JOBGATE_REDIS_PARTITIONS", "1"),
        metavar="N",
        help="the deployment's --redis-partitions (default: $JOBGATE_REDIS_PARTITIONS or 1)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.data_dir:
        args.redis_url = None  # the data directory is what was asked for
    elif not args.redis_url:
        return _fail(
            "--redis-url (or JOBGATE_REDIS_URL) or --data-dir is required: the audit stream "
            "lives in Redis or in serve's data directory",
            EXIT_USAGE,
        )
    return _run_checked(args)


def _run_checked(args: argparse.Namespace) -> int:
    if args.redis_url and not args.redis_url.startswith(
        ("redis://", "rediss://", "unix://", "redis+sentinel://")
    ):
        return _fail(
            f"unsupported --redis-url {args.redis_url!r}: use redis://HOST:PORT/DB", EXIT_USAGE
        )
    try:
        args.redis_partitions = parse_partitions(str(args.redis_partitions))
    except ValueError as error:
        return _fail(f"--redis-partitions: {error}", EXIT_USAGE)
    # The store's own warnings (reconnects, persistence settings) are for the
    # servers' logs; here they would interleave with the events and the error.
    logging.basicConfig(level=logging.ERROR, format="jobgate events: %(levelname)s: %(message)s")
    formatter = format_json if args.json else format_human
    try:
        return asyncio.run(_read_events(args, formatter, sys.stdout))
    except BrokenPipeError:
        # `jobgate events | head`: the reader left; that is not an error.
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        # Ctrl-C while printing the backlog (with --follow, SIGINT is a clean stop).
        return EXIT_INTERRUPTED


async def _read_events(
    args: argparse.Namespace, formatter: Callable[[JobEvent], str], out: TextIO
) -> int:
    try:
        store = _source(args)
    except ValueError as error:
        return _fail(str(error), EXIT_USAGE)
    where = args.data_dir or args.redis_url
    try:
        await store.open()
        if args.follow:
            await _follow(store, args.job, formatter, out)
        else:
            await _print_backlog(store, args.job, formatter, out)
    except StoreError as error:
        return _fail(f"{where}: {error.message}", EXIT_STORE_ERROR)
    finally:
        with contextlib.suppress(StoreError):
            await store.close()
    return EXIT_OK


def _source(args: argparse.Namespace) -> EventSource:
    if args.data_dir:
        from store.memory.durable import event_reader

        return event_reader(args.data_dir)
    return open_store(
        args.redis_url, partition=args.redis_partition, partitions=args.redis_partitions
    )


async def _print_backlog(
    store: EventSource, job_id: str | None, formatter: Callable[[JobEvent], str], out: TextIO
) -> str:
    """Print everything the stream holds; return the position of the last event."""
    after = "0"
    while True:
        page = await store.events(after=after, count=PAGE_SIZE)
        _print(page, job_id, formatter, out)
        if not page:
            return after
        after = page[-1].id


async def _follow(
    store: EventSource, job_id: str | None, formatter: Callable[[JobEvent], str], out: TextIO
) -> None:
    """Print the backlog, then new events as they come, until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        # The reader's error (the store went away) is raised from here.
        await unless_set(stop, _tail(store, job_id, formatter, out))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _tail(
    store: EventSource, job_id: str | None, formatter: Callable[[JobEvent], str], out: TextIO
) -> None:
    after = await _print_backlog(store, job_id, formatter, out)
    while True:
        page = await store.events(after=after, count=PAGE_SIZE, block=FOLLOW_BLOCK)
        _print(page, job_id, formatter, out)
        if page:
            after = page[-1].id


def _print(
    events: list[JobEvent], job_id: str | None, formatter: Callable[[JobEvent], str], out: TextIO
) -> None:
    lines = [
        formatter(e) for e in events if job_id is None or job_id in (e.job_id, e.parent_job_id)
    ]
    if lines:
        out.write("".join(line + "\n" for line in lines))
        out.flush()  # followers read line by line through a pipe


def format_human(event: JobEvent) -> str:
    """One line: time, job, parent, tenant, model, from -> to, attempts, worker, error_code."""
    source = event.from_status.value if event.from_status is not None else "new"
    return "  ".join(
        [
            _iso(event.time),
            event.job_id,
            f"parent={event.parent_job_id or '-'}",
            f"tenant={event.tenant}",
            f"model={event.model}",
            f"{source} -> {event.to_status.value}",
            f"attempts={event.attempts}",
            f"worker={event.worker_id or '-'}",
            f"error={event.error_code or '-'}",
            # an admin's Cancel or RetryJob: who acted
            *([f"by={event.actor}"] if event.actor else []),
        ]
    )


def format_json(event: JobEvent) -> str:
    """One JSON object; `from` is null for the event that created the job, `actor`
    is "" unless an admin's Cancel or RetryJob made the change ("admin:ops")."""
    return json.dumps(
        {
            "id": event.id,
            "time": _iso(event.time),
            "job_id": event.job_id,
            "parent_job_id": event.parent_job_id,
            "tenant": event.tenant,
            "model": event.model,
            "priority": event.priority.name.lower(),
            "from": event.from_status.value if event.from_status is not None else None,
            "to": event.to_status.value,
            "attempts": event.attempts,
            "worker_id": event.worker_id,
            "error_code": event.error_code,
            "actor": event.actor,
        },
        separators=(",", ":"),
    )


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fail(message: str, code: int) -> int:
    print(f"jobgate events: error: {message}", file=sys.stderr)
    return code


def _silence_stdout() -> None:
    # Python flushes stdout at exit; point it at /dev/null so that flush
    # cannot raise BrokenPipeError again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
