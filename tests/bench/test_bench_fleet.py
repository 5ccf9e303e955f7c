"""`python -m bench.fleet --quick` runs end to end and prints every row (no figure asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_server import require_redis_server

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(200)]


def test_the_fleet_bench_reports_activation_and_registry_rows() -> None:
    require_redis_server()
    command = [sys.executable, "-m", "bench.fleet", "--quick"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-4000:]
    for row in ("| Submit -> active", "| SetResult -> idle", "| registry: 10 workers"):
        assert row in done.stdout, done.stdout
