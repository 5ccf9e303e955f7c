"""The web console: `jobgate console`, a JobService client that serves HTML.

    from jobgate.console.settings import ConsoleSettings
    from jobgate.console.server import run_console   # needs jobgate[console]

`settings` and `passwords` are standard library only (flags and refusals work
without the extra); `server`, `app` and the page modules need Starlette,
uvicorn and Jinja2. The console never touches the store: every page is one or
two JobService calls made with the viewer's credentials.
"""

from jobgate.console.settings import ConsoleSettings

__all__ = ["ConsoleSettings"]
