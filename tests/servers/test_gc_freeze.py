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

from jobgate.worker import _daemon
from tests.worker.conftest import worker_config

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


def test_the_worker_daemon_freezes_its_heap_before_it_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen: list[bool] = []

    async def run(self: Any) -> int:
        return 0 if frozen else 1  # exit code 0 only if the freeze came first

    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(_daemon.Worker, "run", run)
    assert _daemon.run_worker(worker_config("127.0.0.1:1", "m"), lambda ctx: "ok") == 0
