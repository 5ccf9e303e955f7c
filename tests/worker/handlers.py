"""Handlers for subprocess workers in tests (`--handler tests.worker.handlers:NAME`)."""

from __future__ import annotations

import time

from jobgate import JobContext, RetryableError


def echo(ctx: JobContext) -> bytes:
    """Return the payload unchanged, with its content type."""
    ctx.result_content_type = ctx.content_type
    return ctx.payload


def slow(ctx: JobContext) -> str:
    """Run for labels['seconds'] (default 2), reporting progress, unless cancelled."""
    seconds = float(ctx.labels.get("seconds", "2"))
    steps = 10
    for step in range(steps):
        ctx.report(step / steps, "working")
        if ctx.cancel_event.wait(seconds / steps):
            return "cancelled"
    return f"slept {seconds}"


def staged(ctx: JobContext) -> str:
    """Walk through named stages, pausing labels['pause'] seconds (default 0.4) in each."""
    pause = float(ctx.labels.get("pause", "0.4"))
    stages = ("download", "preprocess", "infer", "postprocess")
    for index, stage in enumerate(stages):
        ctx.report(index / len(stages), stage)
        time.sleep(pause)
    return "done"


def fail(ctx: JobContext) -> None:
    """Always fail with a plain exception."""
    raise ValueError(f"cannot handle {ctx.payload!r}")


def flaky(ctx: JobContext) -> str:
    """Fail retryably on the first attempt, succeed after."""
    if ctx.attempt < 2:
        raise RetryableError("GPU busy, try later")
    return f"ok on attempt {ctx.attempt}"
