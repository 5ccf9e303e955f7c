"""Finding the real tools the deploy tests run (promtool, prometheus, validators).

A missing tool skips its tests with the reason shown, except under
JOBGATE_REQUIRE_TOOLS=1 (set by .ci/run), where it fails them: CI must never
go green by skipping what it was meant to check.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def require_tool(name: str, hint: str) -> str:
    """The tool's path: from the venv's bin first (PyPI tools), then PATH."""
    venv_tool = Path(sys.executable).parent / name
    if venv_tool.exists():
        return str(venv_tool)
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed ({hint})"
        if os.environ.get("JOBGATE_REQUIRE_TOOLS") == "1":
            pytest.fail(message + " and JOBGATE_REQUIRE_TOOLS=1")
        pytest.skip(message)
    return path


def promtool() -> str:
    return require_tool("promtool", "apt-get install prometheus")


def run_tool(*args: str, cwd: Path | None = None, timeout: float = 30) -> str:
    """Run a tool; fail the test with its whole output unless it exits 0."""
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{output}"
    return output


def require_module(name: str, hint: str) -> Any:
    """Import a Python module the deploy tests need; skip or fail as require_tool does."""
    try:
        return importlib.import_module(name)
    except ImportError:
        message = f"Python module {name} is not installed ({hint})"
        if os.environ.get("JOBGATE_REQUIRE_TOOLS") == "1":
            pytest.fail(message + " and JOBGATE_REQUIRE_TOOLS=1")
        pytest.skip(message)


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """Every YAML document in a file (PyYAML comes with kubernetes-validate)."""
    yaml = require_module("yaml", "pip install -e '.[dev]'")
    with path.open() as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc is not None]
