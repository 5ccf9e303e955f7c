"""The console's ASGI app: routes, the per-request session, and security headers.

`build_app(settings)` returns a Starlette app whose state is one `Console`:
the gateway clients, the shared status feeds, the sessions and the bulk
retries. Pages are in `pages`, actions (POSTs) in `actions`, live streams in
`events`.

Every response carries a strict Content-Security-Policy (scripts and styles
from this origin only, no inline script), so even a value that escaped
escaping could not run. Without a login the console only answers requests
whose Host is loopback: a DNS-rebinding page cannot read it (and so cannot
read a CSRF token from it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobgate.console import actions, events, pages
from jobgate.console.bulk import BulkRetries
from jobgate.console.gateway import Gateway
from jobgate.console.sessions import COOKIE, Session, Sessions
from jobgate.console.settings import ConsoleSettings
from jobgate.console.state import HERE, Console, templates
from jobgate.console.streams import StatusHub

SECURITY_HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)


def routes() -> list[BaseRoute]:
    return [
        Route("/", pages.home),
        Route("/jobs", pages.jobs),
        Route("/jobs/{job_id}", pages.job),
        Route("/jobs/{job_id}/events", events.job_events),
        Route("/jobs/{job_id}/cancel", actions.cancel, methods=["POST"]),
        Route("/jobs/{job_id}/retry", actions.retry, methods=["POST"]),
        Route("/failed", pages.failed),
        Route("/failed/retry", actions.bulk_retry, methods=["POST"]),
        Route("/failed/retries/{run_id}", pages.bulk_run),
        Route("/failed/retries/{run_id}/events", events.bulk_events),
        Route("/queues", pages.queues),
        Route("/workers", pages.workers),
        Route("/login", pages.login),
        Route("/login", actions.login, methods=["POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


def build_app(settings: ConsoleSettings, gateway: Gateway | None = None) -> Starlette:
    """The console app; `gateway` defaults to one for `settings.gateway`."""
    the_gateway = gateway or Gateway(settings.gateway)
    console = Console(
        settings=settings,
        gateway=the_gateway,
        hub=StatusHub(the_gateway.client),
        sessions=Sessions(settings.session_ttl),
        bulk=BulkRetries(),
        templates=templates(),
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await console.close()

    app = Starlette(routes=routes(), lifespan=lifespan)
    app.state.console = console
    app.add_middleware(SessionMiddleware, console=console)
    app.add_middleware(GuardMiddleware, loopback_only=not settings.login_required)
    return app


class GuardMiddleware:
    """Security headers on every response; loopback Host only when there is no login."""

    def __init__(self, app: ASGIApp, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.loopback_only and not _loopback_host(_header(scope, b"host")):
            response = PlainTextResponse("this console answers loopback host names only", 421)
            await response(scope, receive, _with_headers(send, SECURITY_HEADERS))
            return
        await self.app(scope, receive, _with_headers(send, SECURITY_HEADERS))


class SessionMiddleware:
    """Loads the session named by the cookie (a new one if none) and sets the cookie."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/static/"):
            await self.app(scope, receive, send)
            return
        sessions = self.console.sessions
        cookie_id = Request(scope).cookies.get(COOKIE)
        found = sessions.get(cookie_id)
        scope.setdefault("state", {})["session"] = found or sessions.new()

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                session: Session = scope["state"]["session"]
                if session.id != cookie_id:
                    message["headers"] = [*message.get("headers", []), self._cookie(session)]
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _cookie(self, session: Session) -> tuple[bytes, bytes]:
        max_age = int(self.console.sessions.ttl.total_seconds())
        parts = [f"{COOKIE}={session.id}", "Path=/", f"Max-Age={max_age}"]
        parts += ["HttpOnly", "SameSite=Strict"]
        if self.console.settings.secure_cookies:
            parts.append("Secure")
        return b"set-cookie", "; ".join(parts).encode()


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


def _loopback_host(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.removeprefix("[").removesuffix("]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _with_headers(send: Send, headers: tuple[tuple[bytes, bytes], ...]) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *headers]
        await send(message)

    return wrapped
