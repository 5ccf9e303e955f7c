"""A server or worker process freezes its startup heap: full collections skip it.

Without the freeze each full collection walked every imported module's
objects: 14-22 ms pauses in a server, each a burst of late claims at 200
jobs/s (docs/performance.md, "Pauses: the garbage collector").
"""

from __future__ import annotations

import gc
import subprocess
import sys
from typing import Any

import pytest

from jobgate import _logs, worker
from jobgate.cli import main

# A `jobgate serve` process object run as its own process (install_signals):
# it prints how many objects the collector no longer walks once it serves.
SERVE_AND_COUNT = """
import asyncio, gc, io
from jobgate.cli._servers import process
from serving.settings import Address, ServerSettings

async def main() -> None:
    loopback = Address("127.0.0.1", 0)
    settings = ServerSettings(listen=loopback, worker_listen=loopback, metrics_listen=loopback)
    server = process("serve", settings, out=io.StringIO(), install_signals=True)
    running = asyncio.create_task(server.run())
    await asyncio.wait_for(server.started.wait(), 10)
    print(gc.get_freeze_count(), flush=True)
    server.request_stop()
    await running

asyncio.run(main())
"""


def test_a_server_process_freezes_what_it_built_at_startup() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SERVE_AND_COUNT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[0]) > 10_000  # the imports alone are more


def test_the_worker_command_freezes_its_heap_before_the_daemon_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def run_worker(config: Any, handler: Any) -> int:
        calls.append("run")
        return 0

    def collect() -> int:
        calls.append("collect")
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(worker, "run_worker", run_worker)
    # in-process: leave pytest's own log handlers where they are
    monkeypatch.setattr(_logs, "configure", lambda log_format, level: None)
    argv = ["worker", "--model", "m", "--handler", "tests.worker.handlers:echo"]

    assert main(argv) == 0
    assert calls == ["collect", "freeze", "run"]
