"""The servers and the worker daemon run on uvloop unless told otherwise (jobgate/_loop.py)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from jobgate import _loop


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_the_processes_run_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_loop.ENVIRONMENT, raising=False)
    assert isinstance(_loop.run(running_loop()), uvloop.Loop)


def test_jobgate_event_loop_asyncio_picks_the_standard_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(_loop.ENVIRONMENT, "asyncio")
    assert not isinstance(_loop.run(running_loop()), uvloop.Loop)
