"""One handler for the CLI tests' worker, dispatching on the job's model."""

from __future__ import annotations

from pathlib import Path

from jobgate import JobContext
from tests.worker import handlers


def dispatch(ctx: JobContext) -> object:
    if ctx.model == "cli-fail":
        handlers.fail(ctx)  # raises
    if ctx.model == "cli-gate":
        return gate(ctx)
    if ctx.model == "cli-staged":
        return handlers.staged(ctx)
    return handlers.echo(ctx)


def gate(ctx: JobContext) -> str:
    """Report half done, then wait until the file named by labels['gate'] exists."""
    ctx.report(0.5, "waiting-for-gate")
    gate_file = Path(ctx.labels["gate"])
    while not gate_file.exists():
        if ctx.cancel_event.wait(0.05):
            return "cancelled"
    return "through the gate"
