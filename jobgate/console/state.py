"""What every request handler shares: the `Console`, and the request's session.

Kept apart from `app` so the page, action and event modules can reach the
console state without importing the app that routes to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from jobgate.client import JobClient
from jobgate.console.bulk import BulkRetries, BulkRetry
from jobgate.console.gateway import Gateway
from jobgate.console.sessions import Session, Sessions
from jobgate.console.settings import AuthMode, ConsoleSettings
from jobgate.console.streams import StatusHub

HERE = Path(__file__).resolve().parent


@dataclass
class Console:
    """What every request handler shares (one per app)."""

    settings: ConsoleSettings
    gateway: Gateway
    hub: StatusHub
    sessions: Sessions
    bulk: BulkRetries
    templates: jinja2.Environment

    def client(self, session: Session) -> JobClient:
        """The JobClient for this viewer: their own token, else the console's."""
        return self.gateway.client(self.token_of(session))

    def token_of(self, session: Session) -> str | None:
        return session.token if self.settings.auth is AuthMode.TOKEN else None

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> Response:
        session = session_of(request)
        html = self.templates.get_template(template).render(
            request_path=request.url.path,
            session=session,
            viewer=session.user,
            csrf=session.csrf,
            read_only=self.settings.read_only,
            login_required=self.settings.login_required,
            **context,
        )
        return HTMLResponse(html, status_code=status)

    async def close(self) -> None:
        await self.bulk.close()
        await self.hub.close()
        await self.gateway.close()


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def session_of(request: Request) -> Session:
    session: Session = request.scope["state"]["session"]
    return session


def bulk_run_of(request: Request) -> BulkRetry | None:
    """The bulk retry the path names, if this session started it (and it has not expired)."""
    return console_of(request).bulk.get(request.path_params["run_id"], session_of(request).id)


def replace_session(request: Request, session: Session) -> None:
    """Make `session` this request's (its cookie is set on the response)."""
    request.scope["state"]["session"] = session


def templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
