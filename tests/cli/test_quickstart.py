"""scripts/quickstart.sh and `make demo`: the README's run command keeps working."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import server_environment
from tests.redis_server import require_redis_server

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = REPO_ROOT / "scripts" / "quickstart.sh"
# Every external command the script runs, besides the venv's jobgate and python
# (both called by absolute path). A PATH of exactly these hides redis-server the
# way a machine without it does: the script's own `command -v` check decides.
SCRIPT_TOOLS = (
    "awk",
    "cat",
    "dirname",
    "grep",
    "mkdir",
    "mktemp",
    "rm",
    "seq",
    "sleep",
    "tail",
    "tee",
)


def run_quickstart(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(QUICKSTART)],
        capture_output=True,
        text=True,
        env={**env, "VENV_BIN": str(Path(sys.executable).parent)},
        cwd=REPO_ROOT,
        timeout=50,
    )


def path_without_redis_server(bin_dir: Path) -> str:
    """A PATH holding symlinks to SCRIPT_TOOLS only."""
    bin_dir.mkdir()
    for tool in SCRIPT_TOOLS:
        found = shutil.which(tool)
        assert found is not None, f"{tool} is not on PATH"
        (bin_dir / tool).symlink_to(found)
    assert shutil.which("redis-server", path=str(bin_dir)) is None
    return str(bin_dir)


def make_dry_run(target: str, venv: Path) -> list[str]:
    make = shutil.which("make")
    if make is None:
        message = "make is not on PATH"
        if os.environ.get("JOBGATE_REQUIRE_TOOLS") == "1":
            pytest.fail(message + " and JOBGATE_REQUIRE_TOOLS=1")
        pytest.skip(message)
    # Under `make check` the parent make's flags would reach this make too.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(
        [make, "-n", "-C", str(REPO_ROOT), target, f"VENV={venv}", "PYTHON=python3"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=30,
    )
    return result.stdout.splitlines()


@pytest.mark.redis
@pytest.mark.slow
def test_quickstart_completes_a_job_on_both_topologies() -> None:
    require_redis_server()

    result = run_quickstart(server_environment())

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("COMPLETED (") == 2
    assert "quickstart done: both runs completed" in result.stdout


@pytest.mark.slow
def test_quickstart_without_redis_server_runs_the_embedded_half_and_reports_the_skip(
    tmp_path: Path,
) -> None:
    env = {**server_environment(), "PATH": path_without_redis_server(tmp_path / "bin")}

    result = run_quickstart(env)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("COMPLETED (") == 1
    assert "2/2 skipped: redis-server is not on PATH" in result.stdout
    assert "apt-get install redis-server" in result.stdout
    assert "the Redis run was skipped" in result.stdout
    assert "gateway on" not in result.stdout


def test_make_demo_builds_the_venv_before_running_the_quickstart(tmp_path: Path) -> None:
    venv = tmp_path / "venv"

    lines = make_dry_run("demo", venv)

    create = lines.index(f"python3 -m venv {venv}")
    demo = lines.index(f"VENV_BIN={venv}/bin bash scripts/quickstart.sh")
    install = lines.index(f"{venv}/bin/pip install --quiet -c constraints.txt -e '.[dev]'")
    assert create < install < demo
