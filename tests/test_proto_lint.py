"""The contract stays `buf lint` clean (STANDARD + COMMENTS, see buf.yaml)."""

from __future__ import annotations

from tests.deploy.tools import REPO, require_tool, run_tool


def test_protos_pass_buf_lint() -> None:
    npx = require_tool("npx", "install Node.js and npm; buf comes from the npm registry")
    run_tool(npx, "--yes", "@bufbuild/buf", "lint", cwd=REPO, timeout=300)
