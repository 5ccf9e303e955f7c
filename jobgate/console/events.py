"""Server-sent events: a job's snapshots, and a bulk retry's progress.

`/jobs/<id>/events` relays the job's shared feed (`streams.StatusHub`): an
`event: job` with the page's live fields per snapshot, `event: problem`
when the call failed, and `event: end` once the job is terminal or the
failure is for good (the page's script then closes the stream, so the
browser does not reconnect; after any other end it reconnects). A comment
line goes out every `KEEPALIVE_SECONDS` so proxies keep the connection open
and a closed tab is noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from jobgate.client import is_terminal
from jobgate.console import present
from jobgate.console.bulk import BulkRetry
from jobgate.console.problems import problem
from jobgate.console.state import bulk_run_of, console_of, session_of
from jobgate.console.streams import Update
from jobgate.v1.limits import JOB_ID_PATTERN

KEEPALIVE_SECONDS = 15.0
RECONNECT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_STREAM_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


def message(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _refusal(request: Request) -> Response | None:
    console = console_of(request)
    if console.settings.login_required and not session_of(request).signed_in:
        return PlainTextResponse("sign in first", 401)
    return None


async def job_events(request: Request) -> Response:
    if (refused := _refusal(request)) is not None:
        return refused
    job_id = request.path_params["job_id"]
    if not JOB_ID_PATTERN.fullmatch(job_id):
        return PlainTextResponse("no such job", 404)
    console = console_of(request)
    updates = console.hub.subscribe(console.token_of(session_of(request)), job_id)
    return StreamingResponse(
        _job_stream(updates), media_type="text/event-stream", headers=_STREAM_HEADERS
    )


async def _job_stream(updates: AsyncGenerator[Update, None]) -> AsyncIterator[str]:
    final = False  # whether the page should stop listening (else it reconnects)
    async for update in _with_keepalive(updates):
        if update is None:
            yield ": keep-alive\n\n"
        elif update.job is not None:
            final = is_terminal(update.job)
            yield message("job", present.snapshot(update.job))
        elif update.error is not None:
            final = update.error.code not in RECONNECT_CODES
            yield message("problem", {"message": problem(update.error).text})
    # A console stopping, or a gateway that stayed unavailable, ends the
    # stream without `end`: the browser reconnects and the page resumes.
    if final:
        yield message("end", {})


async def _with_keepalive(
    updates: AsyncGenerator[Update, None],
) -> AsyncIterator[Update | None]:
    """`updates`, with None whenever KEEPALIVE_SECONDS pass without one."""
    pending: asyncio.Task[Update] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(updates))
            done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_SECONDS)
            if not done:
                yield None
                continue
            pending = None
            try:
                update = done.pop().result()
            except StopAsyncIteration:
                return
            yield update
    finally:
        if pending is not None:
            # The generator must have stopped running before it can be closed.
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        await updates.aclose()


async def bulk_stream(run: BulkRetry) -> AsyncIterator[str]:
    """A bulk retry's progress as server-sent events, `end` after the finished one."""
    while True:
        changed = run.changed
        progress = run.progress()
        yield message("progress", progress)
        # the progress sent, not the run now: it may have finished while the
        # yield waited, and the last progress must show it finished
        if progress["finished"]:
            yield message("end", {})
            return
        try:
            await asyncio.wait_for(changed.wait(), KEEPALIVE_SECONDS)
        except TimeoutError:
            yield ": keep-alive\n\n"


async def bulk_events(request: Request) -> Response:
    if (refused := _refusal(request)) is not None:
        return refused
    if (run := bulk_run_of(request)) is None:
        return PlainTextResponse("no such bulk retry", 404)
    return StreamingResponse(
        bulk_stream(run), media_type="text/event-stream", headers=_STREAM_HEADERS
    )
