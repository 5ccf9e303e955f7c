"""Client commands: `jobgate submit | get | watch | cancel`, and the `worker` daemon.

Human output by default, `--json` for scripts. Errors are one line on stderr;
exit codes and the shared plumbing are in `_common`. The commands that find
and redrive jobs (`list`, `retry`) are in `_jobs`, the operator's views
(`workers`, `queues`) in `_fleet`; all are registered here.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import mimetypes
import os
import re
import sys
from pathlib import Path
from typing import Any

from jobgate._logs import LOG_FORMATS, LOG_LEVELS
from jobgate.cli import _fleet, _jobs
from jobgate.cli._common import (
    EXIT_JOB_NOT_COMPLETED,
    EXIT_OK,
    EXIT_RPC,
    EXIT_USAGE,
    UsageError,
    client_command,
    fail,
    json_flag,
    print_json,
)
from jobgate.cli._render import ProgressLine, describe_job, job_line
from jobgate.client import PRIORITIES, JobClient, is_terminal, job_spec, priority_value
from jobgate.client._channel import ConnectionConfig
from jobgate.errors import JobgateError
from jobgate.v1 import job_pb2, job_service_pb2
from jobgate.v1.limits import POOL_PATTERN

__all__ = ["UsageError", "add_commands", "parse_labels", "read_batch", "read_group"]


def add_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Register submit, get, watch, cancel, list, retry, workers, queues and worker."""
    _add_submit(subcommands)
    _add_get(subcommands)
    _add_watch(subcommands)
    _add_cancel(subcommands)
    _jobs.add_commands(subcommands)
    _fleet.add_commands(subcommands)
    _add_worker(subcommands)


# ---------------------------------------------------------------- parsers


def _add_submit(subcommands: argparse._SubParsersAction[Any]) -> None:
    with client_command(
        subcommands, "submit", _submit, help="submit a job or a group of jobs"
    ) as parser:
        parser.add_argument("--model", help="model name: which workers may run the job")
        parser.add_argument(
            "--pool",
            default="",
            metavar="NAME",
            help="the worker pool to run in (default: any, or the tenant's first pool); "
            'for --group and --batch, the default of children and lines without "pool"',
        )
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--file", metavar="FILE", help="payload from a file ('-' for stdin)")
        source.add_argument("--data", metavar="TEXT", help="payload given inline (UTF-8)")
        source.add_argument(
            "--group",
            metavar="FILE",
            help='a group: JSON (a list of children or {"children": [...]}) or JSONL, each '
            'child {"model", "data" or "payload_b64", "content_type", "labels", "pool"}',
        )
        source.add_argument(
            "--batch",
            metavar="FILE",
            help="many jobs in one BatchSubmit (all or nothing): JSON lines, one job a line, "
            'each like a group child plus optional "priority" and "idempotency_key"',
        )
        parser.add_argument(
            "--max-parallel",
            type=int,
            default=0,
            help="group: children run at once (0 = no cap, 1 = one after another)",
        )
        parser.add_argument("--priority", choices=sorted(PRIORITIES), default="batch")
        parser.add_argument("--idempotency-key", metavar="KEY", default="")
        parser.add_argument(
            "--label", action="append", default=[], metavar="K=V", help="a label (repeatable)"
        )
        parser.add_argument("--content-type", default="", help="payload type (default: guessed)")
        parser.add_argument("--max-attempts", type=int, default=0, help="0 = server default")
        parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
        json_flag(parser, "machine-readable output")


def _add_get(subcommands: argparse._SubParsersAction[Any]) -> None:
    with client_command(subcommands, "get", _get, help="show a job", job_id=True) as parser:
        json_flag(parser, "the Job as JSON")
        parser.add_argument(
            "--output", metavar="FILE", help="write the raw result bytes to FILE ('-' for stdout)"
        )


def _add_watch(subcommands: argparse._SubParsersAction[Any]) -> None:
    with client_command(
        subcommands, "watch", _watch, help="follow a job live until it ends", job_id=True
    ) as parser:
        json_flag(parser, "one JSON Job per snapshot")


def _add_cancel(subcommands: argparse._SubParsersAction[Any]) -> None:
    with client_command(subcommands, "cancel", _cancel, help="cancel a job", job_id=True) as parser:
        parser.add_argument("--reason", default="", help="why (recorded with the job)")
        json_flag(parser, "the CancelResponse as JSON")


def _add_worker(subcommands: argparse._SubParsersAction[Any]) -> None:
    parser = subcommands.add_parser(
        "worker",
        help="run the GPU-host worker daemon",
        description="Claim jobs for the given models and run HANDLER(ctx) for each "
        "(see docs/handlers.md). SIGTERM drains: no new claims, in-flight jobs finish.",
    )
    parser.add_argument(
        "--target",
        default=os.environ.get("JOBGATE_WORKER_TARGET"),
        help="WorkerService address (env JOBGATE_WORKER_TARGET, default 127.0.0.1:50052)",
    )
    parser.add_argument(
        "--model", action="append", required=True, metavar="NAME", help="repeatable"
    )
    parser.add_argument(
        "--pool",
        default=os.environ.get("JOBGATE_WORKER_POOL", ""),
        metavar="NAME",
        help="the pool this worker serves (env JOBGATE_WORKER_POOL; default: its token's "
        "pool, `default` without auth): it runs only that pool's and any-pool jobs",
    )
    parser.add_argument("--handler", required=True, metavar="MODULE:FUNCTION")
    parser.add_argument("--concurrency", type=int, default=1, help="jobs run at once")
    parser.add_argument(
        "--token", help="bearer token with the worker role (env JOBGATE_WORKER_TOKEN)"
    )
    parser.add_argument("--worker-id", help="default: hostname-pid")
    parser.add_argument(
        "--grace-period",
        type=float,
        default=30.0,
        help="seconds in-flight jobs get to finish after SIGTERM",
    )
    parser.add_argument(
        "--claim-wait", type=float, default=30.0, help="long-poll seconds (at most 60)"
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=0.5,
        help="reported progress is sent at most this often, in seconds (besides the "
        "heartbeats at a third of the lease)",
    )
    parser.add_argument("--tls-ca", metavar="FILE")
    parser.add_argument("--tls-cert", metavar="FILE")
    parser.add_argument("--tls-key", metavar="FILE")
    parser.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default="info")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="json: one object a line, job_id and tenant on every job line",
    )
    parser.set_defaults(run=_run_worker)


# ---------------------------------------------------------------- running


def _exit_for(job: job_pb2.Job) -> int:
    return EXIT_OK if job.status == job_pb2.JOB_STATUS_COMPLETED else EXIT_JOB_NOT_COMPLETED


# ---------------------------------------------------------------- submit


def parse_labels(pairs: list[str]) -> dict[str, str]:
    """['k=v', ...] -> {'k': 'v'}; a pair without '=' is a usage error."""
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--label wants KEY=VALUE, got {pair!r}")
        labels[key] = value
    return labels


def _read_payload(args: argparse.Namespace) -> tuple[bytes, str]:
    if args.data is not None:
        return args.data.encode(), args.content_type or "text/plain; charset=utf-8"
    if args.file is None:
        raise UsageError("give the payload with --file FILE or --data TEXT (or use --group)")
    try:
        payload = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {args.file}: {error.strerror}") from error
    guessed, _ = mimetypes.guess_type(args.file)
    return payload, args.content_type or guessed or "application/octet-stream"


def read_group(
    path: str, default_model: str | None, default_pool: str = ""
) -> list[job_pb2.JobSpec]:
    """Children from a JSON list, a {"children": [...]} object, or JSON lines."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from error
    try:
        loaded: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            loaded = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}: neither JSON nor JSON lines ({error})") from error
    if isinstance(loaded, dict):
        loaded = loaded.get("children")
    if not isinstance(loaded, list) or not loaded:
        raise UsageError(f"{path}: expected a non-empty list of children")
    return [
        _child(item, index, (default_model, default_pool), path)
        for index, item in enumerate(loaded)
    ]


def _child(
    item: Any,
    index: int,
    defaults: tuple[str | None, str],
    path: str,
    what: str = "child",
) -> job_pb2.JobSpec:
    """One JobSpec from a file's item; `defaults` are the model and pool of the flags."""
    where = f"{path}: {what} {index}"
    if not isinstance(item, dict):
        raise UsageError(f"{where}: expected an object")
    default_model, default_pool = defaults
    model = item.get("model") or default_model
    if not model:
        raise UsageError(f"{where}: no model (give one per child or --model)")
    if "payload_b64" in item:
        try:
            payload = base64.b64decode(item["payload_b64"], validate=True)
        except ValueError as error:
            raise UsageError(f"{where}: payload_b64 is not base64") from error
        default_type = "application/octet-stream"
    else:
        payload = str(item.get("data", "")).encode()
        default_type = "text/plain; charset=utf-8"
    labels = item.get("labels") or {}
    if not isinstance(labels, dict):
        raise UsageError(f"{where}: labels must be an object")
    max_attempts = item.get("max_attempts", 0)
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool):
        raise UsageError(f"{where}: max_attempts must be a whole number")
    return job_spec(
        str(model),
        payload,
        content_type=str(item.get("content_type") or default_type),
        labels={str(k): str(v) for k, v in labels.items()},
        max_attempts=max_attempts,
        pool=str(item.get("pool") or default_pool),
    )


def read_batch(
    path: str, default_model: str | None, default_pool: str = ""
) -> list[tuple[int, job_service_pb2.SubmitRequest]]:
    """One SubmitRequest per JSON line (a child's fields, plus priority and
    idempotency_key), each with its line number; blank lines are skipped."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from error
    requests = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}: line {number} is not JSON ({error.msg})") from error
        spec = _child(item, number, (default_model, default_pool), path, what="line")
        priority = str(item.get("priority", "batch"))
        if priority.lower() not in PRIORITIES:
            raise UsageError(f"{path}: line {number}: unknown priority {priority!r}")
        request = job_service_pb2.SubmitRequest(
            idempotency_key=str(item.get("idempotency_key", "")),
            priority=priority_value(priority),
            job=spec,
        )
        requests.append((number, request))
    if not requests:
        raise UsageError(f"{path}: no jobs (one JSON object a line)")
    return requests


_ITEM = re.compile(r"requests\[(\d+)\]")


def _refused_line(error: JobgateError, lines: list[int]) -> int | None:
    """The line of the batch file whose item the server refused, if it named one."""
    for violation in error.field_violations:
        match = _ITEM.match(violation.field)
        if match and int(match.group(1)) < len(lines):
            return lines[int(match.group(1))]
    return None


async def _submit_batch(args: argparse.Namespace, client: JobClient) -> int:
    if args.wait:
        raise UsageError("--wait follows one job; use jobgate watch ID for each of a batch")
    numbered = read_batch(args.batch, args.model, args.pool)
    try:
        responses = await client.batch_submit([request for _, request in numbered])
    except JobgateError as error:
        line = _refused_line(error, [number for number, _ in numbered])
        if line is None:
            raise
        # Nothing was created; point at the line to fix, not at an item index.
        return fail(f"{args.batch}: line {line}: {error}", EXIT_RPC)
    if args.json:
        batch = job_service_pb2.BatchSubmitResponse(responses=responses)
        print_json(batch)
        return EXIT_OK
    for response in responses:
        reused = " (existing job for this idempotency key)" if response.reused else ""
        print(f"submitted {job_line(response.job)}{reused}", flush=True)
    return EXIT_OK


async def _submit(args: argparse.Namespace, client: JobClient) -> int:
    """Submit one job (--model with --file or --data), a group (--group FILE)
    or many jobs in one atomic call (--batch FILE)."""
    if args.batch is not None:
        return await _submit_batch(args, client)
    request = job_service_pb2.SubmitRequest(
        idempotency_key=args.idempotency_key, priority=priority_value(args.priority)
    )
    if args.group is not None:
        children = read_group(args.group, args.model, args.pool)
        request.group.CopyFrom(job_pb2.GroupSpec(children=children, max_parallel=args.max_parallel))
    else:
        if not args.model:
            raise UsageError("--model is required for a single job")
        payload, content_type = _read_payload(args)
        request.job.CopyFrom(
            job_spec(
                args.model,
                payload,
                content_type=content_type,
                labels=parse_labels(args.label),
                max_attempts=args.max_attempts,
                pool=args.pool,
            )
        )
    response = await client.submit_request(request)
    if args.json:
        print_json(response)
    else:
        reused = " (existing job for this idempotency key)" if response.reused else ""
        print(f"submitted {job_line(response.job)}{reused}", flush=True)
    if not args.wait:
        return EXIT_OK
    return await _follow(client, response.job.id, args)


# ---------------------------------------------------------------- get, watch, cancel


async def _get(args: argparse.Namespace, client: JobClient) -> int:
    job = await client.get(args.job_id)
    if args.output:
        if args.output == "-":
            sys.stdout.buffer.write(job.result)
            sys.stdout.flush()
        else:
            await asyncio.to_thread(Path(args.output).write_bytes, job.result)
    elif args.json:
        print_json(job)
    else:
        print(describe_job(job), flush=True)
    return EXIT_OK


async def _watch(args: argparse.Namespace, client: JobClient) -> int:
    """A live progress line (stage, queue position) until the job ends.
    Exits 1 when it ends FAILED, CANCELLED or PARTIAL."""
    return await _follow(client, args.job_id, args)


async def _follow(client: JobClient, job_id: str, args: argparse.Namespace) -> int:
    last: job_pb2.Job | None = None
    line = ProgressLine(sys.stdout, live=sys.stdout.isatty())
    async for job in client.watch(job_id, timeout=args.timeout):
        last = job
        if args.json:
            print_json(job)
        else:
            line.update(job)
    if last is None or not is_terminal(last):
        raise JobgateError(f"the status stream of {job_id} ended early")
    if not args.json:
        line.finish(last)
    return _exit_for(last)


async def _cancel(args: argparse.Namespace, client: JobClient) -> int:
    response = await client.cancel(args.job_id, args.reason)
    if args.json:
        print_json(response)
    elif response.cancelled:
        print(f"cancelled {job_line(response.job)}", flush=True)
    else:
        print(f"not cancelled: {job_line(response.job)} had already ended", flush=True)
    return EXIT_OK


# ---------------------------------------------------------------- worker


def _run_worker(args: argparse.Namespace) -> int:
    from jobgate import _logs, worker  # imported here so the client commands stay light

    _logs.configure(args.log_format, args.log_level)
    if args.concurrency < 1:
        return fail("--concurrency must be at least 1", EXIT_USAGE)
    if not 0 < args.claim_wait <= 60:
        return fail("--claim-wait must be in (0, 60] seconds", EXIT_USAGE)
    try:
        handler = worker.load_handler(args.handler)
        token = (
            args.token
            or os.environ.get("JOBGATE_WORKER_TOKEN")
            or os.environ.get("JOBGATE_TOKEN")
            or None
        )
        # JOBGATE_TARGET names the JobService; a worker talks to the WorkerService.
        connection = ConnectionConfig(
            target=args.target or worker.DEFAULT_WORKER_TARGET, token=token
        ).with_tls_files(args.tls_ca, args.tls_cert, args.tls_key)
    except (worker.HandlerLoadError, OSError, ValueError) as error:
        return fail(str(error), EXIT_USAGE)
    if args.pool and not POOL_PATTERN.fullmatch(args.pool):
        return fail(f"--pool must match {POOL_PATTERN.pattern}", EXIT_USAGE)
    config = worker.WorkerConfig(
        models=tuple(args.model),
        connection=connection,
        concurrency=args.concurrency,
        pool=args.pool,
        worker_id=args.worker_id or worker.default_worker_id(),
        grace_period=args.grace_period,
        claim_wait=args.claim_wait,
        progress_interval=args.progress_interval,
    )
    # This process is the daemon's alone: what the imports and the handler's
    # module made lives as long as it does, so a full collection need not
    # walk it (each was a 14 ms pause and a burst of late claims:
    # docs/performance.md, "Pauses: the garbage collector").
    gc.collect()
    gc.freeze()
    return worker.run_worker(config, handler)
