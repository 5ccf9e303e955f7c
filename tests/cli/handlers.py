"""One handler for the CLI tests' worker, dispatching on the job's model."""

from __future__ import annotations

from jobgate import JobContext
from tests.worker import handlers


def dispatch(ctx: JobContext) -> object:
    if ctx.model == "cli-fail":
        handlers.fail(ctx)  # raises
    if ctx.model == "cli-staged":
        return handlers.staged(ctx)
    return handlers.echo(ctx)
