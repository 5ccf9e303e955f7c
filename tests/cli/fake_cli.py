"""Run `jobgate` commands in-process against the fake JobService of tests/client.

The fake server runs on the test's event loop; the command runs in a thread
(it has its own `asyncio.run`), as a user's shell would run it, and its exit
code and output are captured.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass

import pytest

from jobgate.cli import main


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


class Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@dataclass
class FakeCli:
    target: str
    capsys: pytest.CaptureFixture[str]

    async def run(self, command: str, *args: str) -> Ran:
        code = await asyncio.to_thread(main, [command, *args, "--target", self.target])
        captured = self.capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    async def run_on_terminal(
        self, monkeypatch: pytest.MonkeyPatch, command: str, *args: str
    ) -> Ran:
        terminal = Terminal()
        with monkeypatch.context() as patch:
            patch.setattr("sys.stdout", terminal)
            code = await asyncio.to_thread(main, [command, *args, "--target", self.target])
        return Ran(code, terminal.getvalue(), self.capsys.readouterr().err)
