"""`jobgate list` and `jobgate retry`: find jobs with ListJobs, put them back to work.

`list` prints a table (or one JSON Job a line with --json), newest first,
walking pages until --limit jobs are shown. `--status` and `--model` are
terms AND-ed onto `--filter`, so the server does the finding.

`retry` takes job ids, or a filter whose matches it first collects (walking
every page, so the set is fixed before anything changes), then calls RetryJob
on each in turn: a progress bar on a terminal, one line per job otherwise,
then a summary of what was retried and what was refused, with the reason.
A refusal is about one job (JOB_NOT_RETRYABLE, POOL_NOT_ALLOWED, a cap) and
the run goes on; losing the server (UNAVAILABLE after the client's retries,
a deadline, bad credentials) stops it, since every later call would fail the
same way. `--dry-run` changes nothing: it shows each job and whether its
status allows a retry (the server may still refuse one for its pool or a cap).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

import grpc

from jobgate.cli._common import (
    EXIT_OK,
    EXIT_REFUSED,
    UsageError,
    client_command,
    json_flag,
    message_dict,
    print_json,
    print_object,
)
from jobgate.cli._render import progress_bar
from jobgate.cli._table import Column, age, table, use_colour, utc_now
from jobgate.client import JobClient, status_name
from jobgate.errors import JobgateError
from jobgate.v1 import job_pb2

#: `list` shows at most this many jobs unless --limit says otherwise.
DEFAULT_LIMIT = 50
#: ListJobs answers at most this many jobs a page.
MAX_PAGE_SIZE = 1000
#: Codes that are about the connection or the caller, not one job: they stop a retry run.
STOPS_A_RUN = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.CANCELLED,
    }
)
_STATUSES = [
    value.name.removeprefix("JOB_STATUS_")
    for value in job_pb2.JobStatus.DESCRIPTOR.values
    if value.number != job_pb2.JOB_STATUS_UNSPECIFIED
]
_RETRYABLE_SINGLE = (job_pb2.JOB_STATUS_FAILED, job_pb2.JOB_STATUS_CANCELLED)
_RETRYABLE_GROUP = (*_RETRYABLE_SINGLE, job_pb2.JOB_STATUS_PARTIAL)
_STATUS_COLOURS = {
    "COMPLETED": "32",
    "FAILED": "31",
    "PARTIAL": "33",
    "CANCELLED": "35",
    "PROCESSING": "36",
}


def add_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Register list and retry."""
    _add_list(subcommands)
    _add_retry(subcommands)


def _filter_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--filter",
        default="",
        metavar="EXPR",
        help="ListJobs filter, e.g. 'status = FAILED AND create_time >= \"2026-12-01T00:00:00Z\"'",
    )
    parser.add_argument(
        "--status",
        type=str.upper,
        choices=_STATUSES,
        metavar="STATUS",
        help=f"AND status = STATUS ({', '.join(_STATUSES)})",
    )
    parser.add_argument("--model", metavar="MODEL", help="AND model = MODEL")


def _add_list(subcommands: argparse._SubParsersAction[Any]) -> None:
    with client_command(subcommands, "list", _list, help="list jobs, newest first") as parser:
        _filter_flags(parser)
        parser.add_argument(
            "--limit",
            type=_count,
            default=DEFAULT_LIMIT,
            metavar="N",
            help=f"show at most N jobs, across pages (default {DEFAULT_LIMIT}; 0: every match)",
        )
        json_flag(parser, "one JSON Job a line")


def _add_retry(subcommands: argparse._SubParsersAction[Any]) -> None:
    with client_command(
        subcommands, "retry", _retry, help="put failed or cancelled jobs back to work"
    ) as parser:
        parser.add_argument("job_ids", nargs="*", metavar="ID")
        _filter_flags(parser)
        parser.add_argument(
            "--dry-run", action="store_true", help="show what would be retried; change nothing"
        )
        json_flag(parser, "one JSON object a job")


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def quote(value: str) -> str:
    """A filter string literal: double quotes, with backslash before \\ and "."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def combined_filter(expression: str, status: str | None, model: str | None) -> str:
    """`expression` AND status = S AND model = "M", leaving out what is not given."""
    terms = [expression.strip()] if expression.strip() else []
    if status:
        terms.append(f"status = {status}")
    if model:
        terms.append(f"model = {quote(model)}")
    return " AND ".join(terms)


def _filter_of(args: argparse.Namespace) -> str:
    return combined_filter(args.filter, args.status, args.model)


# ---------------------------------------------------------------- list


def job_columns() -> list[Column]:
    return [
        Column("ID"),
        Column("STATUS", colour=lambda cell: _STATUS_COLOURS.get(cell, "")),
        Column("MODEL"),
        Column("POOL"),
        Column("KIND"),
        Column("AGE", right=True),
        Column("ATTEMPTS", right=True),
        Column("ERROR"),
    ]


def job_row(job: job_pb2.Job, now: datetime) -> list[str]:
    kind = job_pb2.JobKind.Name(job.kind).removeprefix("JOB_KIND_").lower()
    attempts = f"{job.attempts}/{job.max_attempts}" if job.max_attempts else str(job.attempts)
    return [
        job.id,
        status_name(job.status),
        job.model or "-",
        job.pool or "any",
        "single" if kind == "unspecified" else kind,
        age(job.create_time, now),
        attempts,
        job.error_code,
    ]


async def first_jobs(client: JobClient, filter: str, limit: int) -> tuple[list[job_pb2.Job], bool]:
    """Up to `limit` matching jobs (0: all), walking pages; and whether more may match."""
    page_size = min(limit, MAX_PAGE_SIZE) if limit else MAX_PAGE_SIZE
    jobs: list[job_pb2.Job] = []
    token = ""
    while True:
        page, token = await client.list_jobs_page(
            filter=filter, page_size=page_size, page_token=token
        )
        room = limit - len(jobs) if limit else len(page)
        jobs += page[:room]
        if limit and len(jobs) >= limit:
            return jobs, len(page) > room or bool(token)
        if not token:
            return jobs, False


async def _list(args: argparse.Namespace, client: JobClient) -> int:
    """Jobs of your tenant (every tenant for an admin), newest first.
    --status and --model are AND-ed onto --filter."""
    jobs, more = await first_jobs(client, _filter_of(args), args.limit)
    if args.json:
        for job in jobs:
            print_json(job)
        return EXIT_OK
    out = sys.stdout
    if not jobs:
        print("no jobs match", file=out, flush=True)
        return EXIT_OK
    now = utc_now()
    rows = [job_row(job, now) for job in jobs]
    print(table(job_columns(), rows, colour=use_colour(out)), file=out, flush=True)
    if more:
        print(
            f"(the first {len(jobs)} shown; more may match: raise --limit, 0 for all)",
            file=sys.stderr,
        )
    return EXIT_OK


# ---------------------------------------------------------------- retry


def looks_retryable(job: job_pb2.Job) -> bool:
    """Whether RetryJob accepts the job's status and kind (pools and caps aside)."""
    if job.kind == job_pb2.JOB_KIND_CHILD:
        return False
    if job.kind == job_pb2.JOB_KIND_GROUP:
        return job.status in _RETRYABLE_GROUP
    return job.status in _RETRYABLE_SINGLE


@dataclass
class Refusal:
    """A job the server would not retry: its ErrorInfo reason (else the status code)."""

    job_id: str
    reason: str
    message: str

    @classmethod
    def of(cls, job_id: str, error: JobgateError) -> Refusal:
        label = error.reason or (error.code.name if error.code is not None else "ERROR")
        return cls(job_id, label, error.message)


@dataclass
class Outcome:
    """What a retry run did, in order."""

    total: int
    retried: list[job_pb2.Job] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)

    @property
    def done(self) -> int:
        return len(self.retried) + len(self.refused)


@dataclass(frozen=True)
class Target:
    """A job to retry: its id, and the job itself when a ListJobs walk found it."""

    job_id: str
    job: job_pb2.Job | None = None


async def _targets(args: argparse.Namespace, client: JobClient) -> list[Target]:
    expression = _filter_of(args)
    if args.job_ids and expression:
        raise UsageError("give job ids or a filter (--filter, --status, --model), not both")
    if args.job_ids:
        return [Target(job_id) for job_id in dict.fromkeys(args.job_ids)]
    if not expression:
        raise UsageError("give the job ids to retry, or --filter EXPR (or --status, --model)")
    found: dict[str, Target] = {}
    async for page in client.list_jobs(filter=expression, page_size=MAX_PAGE_SIZE):
        found.update((job.id, Target(job.id, job)) for job in page if job.id not in found)
    return list(found.values())


async def _retry(args: argparse.Namespace, client: JobClient) -> int:
    """Retry the given jobs, or every job the filter matches: FAILED or
    CANCELLED jobs go back to QUEUED, FAILED, PARTIAL or CANCELLED groups rerun
    the children that did not complete. Exits 1 when any job was refused."""
    targets = await _targets(args, client)
    if not targets:
        if not args.json:
            print("no jobs match", flush=True)
        return EXIT_OK
    if args.dry_run:
        return await _dry_run(args, client, targets)
    out = sys.stdout
    progress = RetryProgress(out, live=out.isatty(), quiet=args.json)
    outcome = Outcome(total=len(targets))
    try:
        for target in targets:
            await _retry_one(client, target.job_id, outcome, progress, json_lines=args.json)
    finally:
        progress.finish()
        if not args.json:
            print(summary(outcome), file=out, flush=True)
    return EXIT_REFUSED if outcome.refused else EXIT_OK


async def _retry_one(
    client: JobClient,
    job_id: str,
    outcome: Outcome,
    progress: RetryProgress,
    *,
    json_lines: bool,
) -> None:
    try:
        job = await client.retry_job(job_id)
    except JobgateError as error:
        if error.code in STOPS_A_RUN:
            raise
        refusal = Refusal.of(job_id, error)
        outcome.refused.append(refusal)
        if json_lines:
            refused = {"outcome": "refused", "reason": refusal.reason, "message": refusal.message}
            print_object({"job_id": job_id, **refused})
        progress.refused(outcome, refusal)
        return
    outcome.retried.append(job)
    if json_lines:
        print_object({"job_id": job_id, "outcome": "retried", "job": message_dict(job)})
    progress.retried(outcome, job)


def summary(outcome: Outcome) -> str:
    """'retried 3 of 4 jobs, refused 1:' then one line per refused job with its reason."""
    text = f"retried {len(outcome.retried)} of {outcome.total} jobs"
    if outcome.done < outcome.total:
        text += f" (stopped; {outcome.total - outcome.done} not tried)"
    if not outcome.refused:
        return text
    rows = [[r.job_id, r.reason, r.message] for r in outcome.refused]
    refused = table([Column("REFUSED"), Column("REASON"), Column("MESSAGE")], rows, colour=False)
    return f"{text}, refused {len(outcome.refused)}:\n{refused}"


class RetryProgress:
    """A bar redrawn in place on a terminal; otherwise one line per job."""

    def __init__(self, out: TextIO, *, live: bool, quiet: bool = False) -> None:
        self._out = out
        self._live = live
        self._quiet = quiet
        self._width = 0

    def retried(self, outcome: Outcome, job: job_pb2.Job) -> None:
        self._show(outcome, f"retried {job.id} {status_name(job.status)}")

    def refused(self, outcome: Outcome, refusal: Refusal) -> None:
        self._show(outcome, f"refused {refusal.job_id}: {refusal.reason}")

    def _show(self, outcome: Outcome, line: str) -> None:
        if self._quiet:
            return
        if self._live:
            bar = progress_bar(outcome.done / outcome.total)
            text = f"{bar} {outcome.done}/{outcome.total}, refused {len(outcome.refused)}"
            self._out.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self._out.write(f"{line} ({outcome.done}/{outcome.total})\n")
        self._out.flush()

    def finish(self) -> None:
        """Clear the bar, so the summary starts on a clean line."""
        if self._live and self._width:
            self._out.write("\r" + " " * self._width + "\r")
            self._out.flush()


@dataclass(frozen=True)
class Verdict:
    """What a retry would do to one job: "" retry it, else the reason it would be refused."""

    job_id: str
    job: job_pb2.Job | None
    refusal: str


async def verdict(client: JobClient, target: Target) -> Verdict:
    job = target.job
    if job is None:
        try:
            job = await client.get(target.job_id)
        except JobgateError as error:
            if error.code in STOPS_A_RUN:
                raise
            return Verdict(target.job_id, None, Refusal.of(target.job_id, error).reason)
    return Verdict(job.id, job, "" if looks_retryable(job) else "JOB_NOT_RETRYABLE")


async def _dry_run(args: argparse.Namespace, client: JobClient, targets: Sequence[Target]) -> int:
    verdicts = [await verdict(client, target) for target in targets]
    if args.json:
        for each in verdicts:
            data: dict[str, Any] = {"job_id": each.job_id, "outcome": "would_retry"}
            if each.refusal:
                data |= {"outcome": "would_refuse", "reason": each.refusal}
            if each.job is not None:
                data["job"] = message_dict(each.job)
            print_object(data)
        return EXIT_OK
    now = utc_now()
    rows = [
        [
            *(job_row(each.job, now)[:6] if each.job else [each.job_id, *["-"] * 5]),
            f"refuse: {each.refusal}" if each.refusal else "retry",
        ]
        for each in verdicts
    ]
    columns = [*job_columns()[:6], Column("WOULD")]
    print(table(columns, rows, colour=use_colour(sys.stdout)), flush=True)
    refused = sum(1 for each in verdicts if each.refusal)
    retried = len(verdicts) - refused
    print(f"dry run, nothing changed: would retry {retried}, would refuse {refused}", flush=True)
    return EXIT_OK
