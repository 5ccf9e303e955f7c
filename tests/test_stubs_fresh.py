"""The committed stubs under jobgate/v1 must be what proto/ generates now."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# Every package that holds generated stubs: the contract and KEDA's scaler.
STUB_PACKAGES = ("v1", "keda")


@pytest.mark.parametrize("package", STUB_PACKAGES)
def test_committed_stubs_match_protos(tmp_path: Path, package: str) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_protos.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    fresh, tree = tmp_path / "jobgate" / package, ROOT / "jobgate" / package
    generated = sorted(p.name for p in fresh.iterdir())
    committed = sorted(
        p.name for p in tree.iterdir() if p.name.endswith((".py", ".pyi")) and "_pb2" in p.name
    )
    assert generated == committed, "stub files differ: run `make proto`"
    stale = [
        name for name in generated if not filecmp.cmp(fresh / name, tree / name, shallow=False)
    ]
    assert not stale, f"stale generated stubs {stale}: run `make proto`"


def test_stubs_import() -> None:
    from jobgate.v1 import job_service_pb2, worker_service_pb2

    assert job_service_pb2.SubmitRequest.DESCRIPTOR.full_name == "jobgate.v1.SubmitRequest"
    assert worker_service_pb2.ClaimNextRequest.DESCRIPTOR.full_name == (
        "jobgate.v1.ClaimNextRequest"
    )
