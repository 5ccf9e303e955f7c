"""scripts/quickstart.sh runs to the end: the README's run command keeps working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import server_environment
from tests.redis_server import require_redis_server

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.redis
@pytest.mark.slow
def test_quickstart_completes_a_job_on_both_topologies() -> None:
    require_redis_server()
    env = {**server_environment(), "VENV_BIN": str(Path(sys.executable).parent)}

    result = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "quickstart.sh")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=50,
    )

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("COMPLETED (") == 2
    assert "quickstart done" in result.stdout
