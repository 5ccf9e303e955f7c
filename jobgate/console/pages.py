"""The pages (GET): jobs, one job, failed jobs, queues, workers, a bulk retry, sign-in.

Each page is one or two JobService calls with the viewer's credentials and
one template. A failed call still renders the page, with the problem said in
words and the matching HTTP status. Queues and workers refresh themselves:
their script re-reads the page with `partial=1`, which renders the table only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import grpc
from google.protobuf.message import Message
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobgate.client import JobClient, is_terminal
from jobgate.console import present
from jobgate.console.listing import MergedCursor, merged_page, term_value, with_term
from jobgate.console.problems import Problem, problem
from jobgate.console.settings import AuthMode
from jobgate.console.state import bulk_run_of, console_of, session_of
from jobgate.errors import JobgateError
from jobgate.v1 import job_pb2
from jobgate.v1.limits import JOB_ID_PATTERN

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_FILTER_CHARS = 2000
FAILED_STATUSES = ("FAILED", "PARTIAL")
#: What an action's redirect may say on the job page (never text from the URL).
NOTICES = {
    "cancelled": "Cancelled.",
    "already-ended": "The job had already ended: nothing to cancel.",
    "retried": "Queued again.",
}
QUICK_STATUSES = ("QUEUED", "PROCESSING", "COMPLETED", "FAILED", "CANCELLED", "PARTIAL", "HELD")


def login_redirect(request: Request) -> Response | None:
    """A redirect to sign-in when this console needs one and the viewer has none."""
    console = console_of(request)
    if not console.settings.login_required or session_of(request).signed_in:
        return None
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?{urlencode({'next': target})}", status_code=303)


async def home(request: Request) -> Response:
    return RedirectResponse("/jobs", status_code=303)


def _page_size(request: Request) -> int:
    raw = request.query_params.get("page_size", "")
    return min(MAX_PAGE_SIZE, max(1, int(raw))) if raw.isdigit() else PAGE_SIZE


def _link(path: str, **params: str) -> str:
    kept = {key: value for key, value in params.items() if value}
    return f"{path}?{urlencode(kept)}" if kept else path


async def jobs(request: Request) -> Response:
    if (redirect := login_redirect(request)) is not None:
        return redirect
    console = console_of(request)
    expression = request.query_params.get("filter", "")[:MAX_FILTER_CHARS]
    token = request.query_params.get("page_token", "")
    size = _page_size(request)
    found: list[job_pb2.Job] = []
    next_token = ""
    trouble: Problem | None = None
    try:
        found, next_token = await console.client(session_of(request)).list_jobs_page(
            filter=expression, page_size=size, page_token=token
        )
    except JobgateError as error:
        trouble = problem(error)
    chosen_status = term_value(expression, "status")
    chosen_model = term_value(expression, "model")
    models = sorted({*present.models_of(found), *([chosen_model] if chosen_model else [])})
    return _page(
        request,
        "jobs.html",
        trouble,
        jobs=found,
        filter=expression,
        statuses=[
            (s, _link("/jobs", filter=with_term(expression, "status", s)), s == chosen_status)
            for s in QUICK_STATUSES
        ],
        any_status=_link("/jobs", filter=with_term(expression, "status", "")),
        models=[
            (m, _link("/jobs", filter=with_term(expression, "model", m)), m == chosen_model)
            for m in models
        ],
        any_model=_link("/jobs", filter=with_term(expression, "model", "")),
        chosen_status=chosen_status,
        chosen_model=chosen_model,
        **_paging_links("/jobs", expression, next_token, size, paged=bool(token)),
    )


async def job(request: Request) -> Response:
    if (redirect := login_redirect(request)) is not None:
        return redirect
    console = console_of(request)
    job_id = request.path_params["job_id"]
    notice = NOTICES.get(request.query_params.get("done", ""), "")
    if not JOB_ID_PATTERN.fullmatch(job_id):
        gone = Problem(404, "No such job", "a job id is a 26-character ULID")
        return console.render(request, "job.html", 404, problem=gone, job=None, notice="")
    try:
        found = await console.client(session_of(request)).get(job_id)
    except JobgateError as error:
        trouble = problem(error)
        return console.render(
            request, "job.html", trouble.status, problem=trouble, job=None, notice=""
        )
    return job_page(request, found, notice=notice)


def job_page(
    request: Request, found: job_pb2.Job, *, notice: str = "", trouble: Problem | None = None
) -> Response:
    """The page of one job (also the answer to a refused action, with its problem)."""
    return _page(
        request,
        "job.html",
        trouble,
        notice=notice,
        job=found,
        fields=present.job_fields(found),
        labels=present.labels(found),
        children=[(child, present.status_of(child)) for child in found.children],
        status_name=present.status_of(found),
        job_terminal=is_terminal(found),
        progress=max(0.0, min(1.0, found.progress)),
        percent=present.percent(found.progress),
        result=present.result_text(found),
        can_cancel=present.can_cancel(found),
        can_retry=present.can_retry(found),
    )


async def failed(request: Request) -> Response:
    if (redirect := login_redirect(request)) is not None:
        return redirect
    console = console_of(request)
    client = console.client(session_of(request))
    extra = with_term(request.query_params.get("filter", "")[:MAX_FILTER_CHARS], "status", "")
    filters = [with_term(extra, "status", status) for status in FAILED_STATUSES]
    size = _page_size(request)
    shown: list[job_pb2.Job] = []
    after: MergedCursor | None = None
    trouble: Problem | None = None
    try:
        raw = request.query_params.get("page_token", "")
        cursor = MergedCursor.decode(raw, 2) if raw else MergedCursor(("", ""))

        async def read(expression: str, token: str) -> tuple[list[job_pb2.Job], str]:
            return await client.list_jobs_page(filter=expression, page_size=size, page_token=token)

        shown, after = await merged_page(read, filters, cursor, size)
    except ValueError as error:
        trouble = Problem(400, "Bad page token", str(error))
    except JobgateError as error:
        trouble = problem(error)
    next_token = after.encode() if after is not None and not after.done else ""
    paged = bool(request.query_params.get("page_token"))
    links = _paging_links("/failed", extra, next_token, size, paged=paged)
    return _page(request, "failed.html", trouble, jobs=shown, filter=extra, **links)


async def queues(request: Request) -> Response:
    return await _admin_page(request, "queues", _sorted_queues)


async def workers(request: Request) -> Response:
    return await _admin_page(request, "workers", JobClient.list_workers)


async def _sorted_queues(client: JobClient) -> list[job_pb2.QueueStats]:
    stats = await client.list_queues()
    return sorted(stats, key=lambda q: (q.model, q.priority, q.pool))


async def _admin_page(
    request: Request, name: str, read: Callable[[JobClient], Awaitable[Sequence[Message]]]
) -> Response:
    """The queues or workers page: `name`.html, or only its table when polled (`partial`)."""
    if (redirect := login_redirect(request)) is not None:
        return redirect
    console = console_of(request)
    rows: Sequence[Message] = []
    trouble: Problem | None = None
    try:
        rows = await read(console.client(session_of(request)))
    except JobgateError as error:
        trouble = _admin_problem(error)
    partial = request.query_params.get("partial")
    return _page(
        request, f"_{name}_table.html" if partial else f"{name}.html", trouble, **{name: rows}
    )


def _page(request: Request, template: str, trouble: Problem | None, **context: Any) -> Response:
    """A page that renders even when its read failed: `trouble` then shows above it."""
    status = trouble.status if trouble else 200
    return console_of(request).render(
        request, template, status=status, problem=trouble, present=present, **context
    )


def _paging_links(
    path: str, expression: str, next_token: str, size: int, *, paged: bool
) -> dict[str, str]:
    """The next page's link (none on the last page) and the first page's (none on the first)."""
    next_link = _link(path, filter=expression, page_token=next_token, page_size=str(size))
    return {
        "next_link": next_link if next_token else "",
        "first_link": _link(path, filter=expression) if paged else "",
    }


def _admin_problem(error: JobgateError) -> Problem:
    if error.code is grpc.StatusCode.PERMISSION_DENIED:
        # Not a failure of the page: it loads (200) and says what it would need.
        detail = "the console calls the gateway with a client token, which may not list these"
        return Problem(200, "This page needs an admin token", detail, info=True)
    return problem(error)


async def bulk_run(request: Request) -> Response:
    if (redirect := login_redirect(request)) is not None:
        return redirect
    console = console_of(request)
    if (run := bulk_run_of(request)) is None:
        gone = Problem(404, "No such bulk retry", "it ended over an hour ago, or is not yours")
        return console.render(request, "bulk.html", 404, problem=gone, run=None)
    return console.render(request, "bulk.html", problem=None, run=run)


async def login(request: Request) -> Response:
    console = console_of(request)
    if not console.settings.login_required:
        return RedirectResponse("/jobs", status_code=303)
    return login_form(request)


def login_form(request: Request, status: int = 200, message: str = "") -> Response:
    console = console_of(request)
    return console.render(
        request,
        "login.html",
        status=status,
        problem=None,
        message=message,
        by_token=console.settings.auth is AuthMode.TOKEN,
        next=safe_next(request.query_params.get("next", "")),
    )


def safe_next(target: str) -> str:
    """A same-site path to return to after sign-in (never another site)."""
    if target.startswith("/") and not target.startswith(("//", "/\\")) and "\n" not in target:
        return target
    return "/jobs"
