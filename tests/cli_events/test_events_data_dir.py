"""`jobgate events --data-dir DIR`: the audit trail of a durable embedded store, read-only."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobgate.cli import main
from store.memory import LocalStore
from store.model import JobSpec, StoreSettings, SubmitRequest
from tests.launcher import REPO_ROOT

MODEL = "text-stats"


def run_events(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["events", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


async def _submit_and_cancel(directory: Path) -> str:
    store = LocalStore(StoreSettings(), data_dir=directory, data_sync="normal")
    await store.open()
    try:
        job = (await store.submit(SubmitRequest("acme", JobSpec(MODEL, b"x")))).job
        await store.cancel("acme", job.id)
        return job.id
    finally:
        await store.close()


def test_lists_the_transitions_kept_in_a_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = asyncio.run(_submit_and_cancel(tmp_path))

    code, lines, _ = run_events(capsys, "--data-dir", str(tmp_path), "--json")

    assert code == 0
    assert [(json.loads(line)["job_id"], json.loads(line)["to"]) for line in lines] == [
        (job_id, "queued"),
        (job_id, "cancelled"),
    ]


_SERVING = """
import asyncio, sys
from store.memory import LocalStore
from store.model import JobSpec, StoreSettings, SubmitRequest

async def main():
    store = LocalStore(StoreSettings(), data_dir=sys.argv[1])
    await store.open()
    job = (await store.submit(SubmitRequest("acme", JobSpec("m", b"x")))).job
    print(job.id, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_reads_a_data_dir_while_its_store_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _SERVING, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
        text=True,
    )
    try:
        assert holder.stdout is not None
        job_id = holder.stdout.readline().strip()

        code, lines, _ = run_events(capsys, "--data-dir", str(tmp_path), "--json")
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()

    assert code == 0
    assert [json.loads(line)["job_id"] for line in lines] == [job_id]


def test_a_dir_without_data_is_a_one_line_error_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_events(capsys, "--data-dir", str(tmp_path))

    assert code == 1
    assert "holds no jobgate data" in err
    assert len(err.splitlines()) == 1
