"""The actions (POST): cancel, retry, bulk retry, sign-in and sign-out.

Every action is a POST of a form that carries the session's CSRF secret; one
without it (or with another session's) changes nothing and answers 403. The
session cookie is SameSite=Strict as well, so a cross-site form does not even
carry it. `--read-only` answers every job action 403 before anything else.
After an action the browser is redirected (303) to a page that shows the
outcome, so a reload never repeats it.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from jobgate.console import pages
from jobgate.console.bulk import MAX_JOBS
from jobgate.console.gateway import TokenCheck
from jobgate.console.problems import Problem, problem
from jobgate.console.settings import AuthMode
from jobgate.console.state import console_of, replace_session, session_of
from jobgate.errors import JobgateError
from jobgate.v1.limits import JOB_ID_PATTERN

MAX_FORM_BYTES = 64 * 1024
FORM_TYPE = "application/x-www-form-urlencoded"


class Refused(Exception):
    """An action refused before any call: the answer is `response`."""

    def __init__(self, response: Response) -> None:
        self.response = response


async def read_form(request: Request) -> list[tuple[str, str]]:
    """The form's fields, once its CSRF secret is checked (else Refused 400/403)."""
    if request.headers.get("content-type", "").split(";")[0].strip() != FORM_TYPE:
        raise Refused(PlainTextResponse("expected a form", 415))
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refused(PlainTextResponse("form too large", 413))
    fields = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    sent = next((value for key, value in fields if key == "csrf"), "")
    if not sent or not session_of(request).csrf_matches(sent):
        raise Refused(PlainTextResponse("missing or stale form token; reload the page", 403))
    return fields


def _field(fields: list[tuple[str, str]], name: str) -> str:
    return next((value for key, value in fields if key == name), "")


async def _job_action(request: Request) -> tuple[str, list[tuple[str, str]]]:
    """Checks shared by the job actions; returns (job_id, form) or raises Refused."""
    console = console_of(request)
    if console.settings.read_only:
        raise Refused(PlainTextResponse("this console is read-only", 403))
    if console.settings.login_required and not session_of(request).signed_in:
        raise Refused(PlainTextResponse("sign in first", 401))
    fields = await read_form(request)
    job_id = request.path_params.get("job_id", "")
    return job_id, fields


async def cancel(request: Request) -> Response:
    return await _act(request, retry=False)


async def retry(request: Request) -> Response:
    return await _act(request, retry=True)


async def _act(request: Request, *, retry: bool) -> Response:
    try:
        job_id, _ = await _job_action(request)
    except Refused as refused:
        return refused.response
    if not JOB_ID_PATTERN.fullmatch(job_id):
        return PlainTextResponse("no such job", 404)
    client = console_of(request).client(session_of(request))
    try:
        if retry:
            await client.retry_job(job_id)
            done = "retried"
        else:
            answer = await client.cancel(job_id, "cancelled from the console")
            done = "cancelled" if answer.cancelled else "already-ended"
    except JobgateError as error:
        trouble = problem(error)
        try:
            current = await client.get(job_id)
        except JobgateError:
            return console_of(request).render(
                request, "job.html", trouble.status, problem=trouble, job=None, notice=""
            )
        return pages.job_page(request, current, trouble=trouble)
    return RedirectResponse(f"/jobs/{job_id}?done={done}", status_code=303)


async def bulk_retry(request: Request) -> Response:
    try:
        _, fields = await _job_action(request)
    except Refused as refused:
        return refused.response
    job_ids = [
        value for key, value in fields if key == "job_id" and JOB_ID_PATTERN.fullmatch(value)
    ]
    if not job_ids:
        return PlainTextResponse("no job to retry", 400)
    console = console_of(request)
    session = session_of(request)
    run = console.bulk.start(session.id, console.client(session), job_ids[:MAX_JOBS])
    return RedirectResponse(f"/failed/retries/{run.id}", status_code=303)


async def login(request: Request) -> Response:
    console = console_of(request)
    if not console.settings.login_required:
        return RedirectResponse("/jobs", status_code=303)
    try:
        fields = await read_form(request)
    except Refused as refused:
        return refused.response
    target = pages.safe_next(_field(fields, "next"))
    if console.settings.auth is AuthMode.TOKEN:
        token = _field(fields, "token").strip()
        outcome = await _check_token(request, token)
        if outcome is not None:
            return outcome
        # The page names no part of the token; "token" says how this person signed in.
        user, person_token = "token", token
    else:
        user, person_token = _field(fields, "user").strip(), None
        users = console.settings.users
        assert users is not None  # settings refuse password mode without users
        if not await asyncio.to_thread(users.check, user, _field(fields, "password")):
            return pages.login_form(request, 401, "Wrong name or password.")
    replace_session(request, console.sessions.sign_in(session_of(request), user, person_token))
    return RedirectResponse(target, status_code=303)


async def _check_token(request: Request, token: str) -> Response | None:
    """None when `token` may sign in, else the login page saying why not."""
    if not token:
        return pages.login_form(request, 401, "Paste a JobService token.")
    try:
        verdict = await console_of(request).gateway.check_token(token)
    except JobgateError as error:
        trouble: Problem = problem(error)
        return pages.login_form(request, trouble.status, trouble.text)
    if verdict is not TokenCheck.VALID:
        return pages.login_form(request, 401, f"Not signed in: {verdict.value}.")
    return None


async def logout(request: Request) -> Response:
    console = console_of(request)
    try:
        await read_form(request)
    except Refused as refused:
        return refused.response
    console.sessions.end(session_of(request))
    replace_session(request, console.sessions.new())
    await console.gateway.forget_unused(console.sessions.tokens_in_use())
    return RedirectResponse("/login" if console.settings.login_required else "/jobs", 303)
