"""`jobgate workers` and `jobgate queues`: the operator's view of the fleet.

Both read one admin-only call (ListWorkers, ListQueues) and print a table,
or one JSON object a line with --json. `queues --watch` redraws the table
every N seconds until Ctrl-C: in place on a terminal (cursor home, each line
cleared to its end, the rest of the screen cleared: no flicker), one table
after another otherwise. A server that drops out during a watch is shown in
the frame and asked again at the next tick; an error that waiting cannot fix
(permission, credentials) ends the watch.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TextIO

import grpc

from jobgate.cli._common import EXIT_OK, UsageError, client_command, json_flag, print_json
from jobgate.cli._render import priority_name
from jobgate.cli._table import Column, age, table, utc_now
from jobgate.client import JobClient
from jobgate.errors import JobgateError
from jobgate.v1 import job_pb2

#: `queues --watch` without a number redraws this often, in seconds.
DEFAULT_WATCH_SECONDS = 2.0
#: The held jobs a worker's row names; the rest are counted.
SHOWN_JOB_IDS = 2
#: Errors a watch shows and waits out; any other ends it.
_PASSING = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_CLAIM_ORDER = {
    job_pb2.PRIORITY_INTERACTIVE: 0,
    job_pb2.PRIORITY_SYSTEM: 1,
    job_pb2.PRIORITY_BATCH: 2,
    job_pb2.PRIORITY_UNSPECIFIED: 2,
}
CLEAR_SCREEN = "\x1b[2J"
HOME = "\x1b[H"
CLEAR_LINE_END = "\x1b[K"
CLEAR_BELOW = "\x1b[J"

Sleep = Callable[[float], Awaitable[None]]


def add_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Register workers and queues."""
    with client_command(
        subcommands,
        "workers",
        _workers,
        help="the workers connected now and the jobs they hold (admin)",
    ) as workers:
        json_flag(workers, "one JSON Worker a line")
    with client_command(
        subcommands,
        "queues",
        _queues,
        help="queued and processing jobs per model, priority and pool (admin)",
    ) as queues:
        json_flag(queues, "one JSON QueueStats a line")
        queues.add_argument(
            "--watch",
            nargs="?",
            type=float,
            const=DEFAULT_WATCH_SECONDS,
            metavar="SECONDS",
            help=f"redraw every SECONDS (default {DEFAULT_WATCH_SECONDS:g}) until Ctrl-C",
        )


# ---------------------------------------------------------------- workers


def held_jobs(job_ids: list[str]) -> str:
    """'0', '1: 01JA', or '3: 01JA, 01JB +1'."""
    if not job_ids:
        return "0"
    text = f"{len(job_ids)}: {', '.join(job_ids[:SHOWN_JOB_IDS])}"
    hidden = len(job_ids) - SHOWN_JOB_IDS
    return f"{text} +{hidden}" if hidden > 0 else text


def workers_table(workers: list[job_pb2.Worker], now: datetime) -> str:
    if not workers:
        return "no workers seen in the last 120 s"
    columns = [Column("WORKER"), Column("POOL"), Column("MODELS"), Column("JOBS")]
    columns.append(Column("LAST SEEN", right=True))
    rows = [
        [
            worker.worker_id,
            worker.pool or "-",
            ",".join(worker.models) or "-",
            held_jobs(list(worker.job_ids)),
            f"{age(worker.last_seen_time, now)} ago",
        ]
        for worker in workers
    ]
    return table(columns, rows, colour=False)


async def _workers(args: argparse.Namespace, client: JobClient) -> int:
    """Every worker seen in the last 120 s or holding a lease, most recently
    seen first, with the jobs it holds leases on."""
    workers = await client.list_workers()
    if args.json:
        for worker in workers:
            print_json(worker)
    else:
        print(workers_table(workers, utc_now()), flush=True)
    return EXIT_OK


# ---------------------------------------------------------------- queues


def claim_order(queues: list[job_pb2.QueueStats]) -> list[job_pb2.QueueStats]:
    """By model, then priority in claim order, then pool (any pool first)."""
    return sorted(queues, key=lambda q: (q.model, _CLAIM_ORDER.get(q.priority, 3), q.pool))


def queues_table(queues: list[job_pb2.QueueStats], now: datetime) -> str:
    if not queues:
        return "no queued or processing jobs"
    columns = [Column("MODEL"), Column("PRIORITY"), Column("POOL")]
    columns += [Column("QUEUED", right=True), Column("PROCESSING", right=True)]
    columns.append(Column("OLDEST", right=True))
    rows = [
        [
            queue.model,
            priority_name(queue.priority),
            queue.pool or "any",
            str(queue.queued),
            str(queue.processing),
            age(queue.oldest_queued_time, now),
        ]
        for queue in claim_order(queues)
    ]
    return table(columns, rows, colour=False)


async def _queues(args: argparse.Namespace, client: JobClient) -> int:
    """One row per model, priority and pool with queued or processing jobs,
    in claim order within a model."""
    if args.watch is None:
        queues = await client.list_queues()
        if args.json:
            for queue in claim_order(queues):
                print_json(queue)
        else:
            print(queues_table(queues, utc_now()), flush=True)
        return EXIT_OK
    if args.json:
        raise UsageError("--watch redraws a table; for scripts, run queues --json when needed")
    if args.watch <= 0:
        raise UsageError(f"--watch wants a number of seconds above 0, got {args.watch:g}")
    out = sys.stdout
    await watch_queues(client.list_queues, out, interval=args.watch, live=out.isatty())
    return EXIT_OK


async def watch_queues(
    fetch: Callable[[], Awaitable[list[job_pb2.QueueStats]]],
    out: TextIO,
    *,
    interval: float,
    live: bool,
    now: Callable[[], datetime] = utc_now,
    sleep: Sleep = asyncio.sleep,
    ticks: int | None = None,
) -> None:
    """Draw the queues table every `interval` seconds, `ticks` times (None: until cancelled)."""
    tick = 0
    while ticks is None or tick < ticks:
        if tick:
            await sleep(interval)
        try:
            body = queues_table(await fetch(), now())
        except JobgateError as error:
            if error.code not in _PASSING:
                raise
            body = f"jobgate: {error} (asking again in {interval:g}s)"
        moment = now().astimezone()
        frame = (
            f"jobgate queues, every {interval:g}s, {moment:%H:%M:%S}  (Ctrl-C to stop)\n\n{body}"
        )
        out.write(_redraw(frame, first=tick == 0) if live else f"{frame}\n\n")
        out.flush()
        tick += 1


def _redraw(frame: str, *, first: bool) -> str:
    """Escape codes that draw `frame` over the previous one, top left."""
    lines = "".join(f"{line}{CLEAR_LINE_END}\n" for line in frame.split("\n"))
    return f"{CLEAR_SCREEN if first else ''}{HOME}{lines}{CLEAR_BELOW}"
