"""`jobgate events` end to end on a real redis-server: list, filter, JSON, follow, errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from jobgate.cli import main
from store import StoreSettings, open_store
from store.model import GroupSpec, JobSpec, JobStatus, SubmitRequest
from tests.redis_server import RedisServer, free_port
from tests.timings import Timings

pytestmark = pytest.mark.redis

REPO = Path(__file__).resolve().parents[2]
MODEL = "text-stats"


def run_events(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["events", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


async def _submit_and_finish(
    url: str, partition: str, status: JobStatus, error_code: str = ""
) -> str:
    """One job through new -> queued -> processing -> status; returns its id."""
    store = open_store(url, StoreSettings(), partition=partition)
    await store.open()
    try:
        submitted = await store.submit(
            SubmitRequest(tenant="acme", work=JobSpec(model=MODEL, payload=b"hello"))
        )
        (claimed,) = await store.claim("gpu-1", [MODEL])
        await store.set_result(claimed.job.id, claimed.lease_id, status, b"", error_code=error_code)
        return submitted.job.id
    finally:
        await store.close()


async def _submit(url: str, partition: str, work: JobSpec | GroupSpec) -> str:
    store = open_store(url, StoreSettings(), partition=partition)
    await store.open()
    try:
        return (await store.submit(SubmitRequest(tenant="acme", work=work))).job.id
    finally:
        await store.close()


def finished_job(redis_server: RedisServer, partition: str, **kwargs: str) -> str:
    status = JobStatus(kwargs.pop("status", "completed"))
    return asyncio.run(_submit_and_finish(redis_server.url, partition, status, **kwargs))


def redis_args(redis_server: RedisServer, partition: str) -> list[str]:
    return ["--redis-url", redis_server.url, "--redis-partition", partition]


def test_lists_every_transition_of_a_job_one_line_each(
    redis_server: RedisServer, partition: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = finished_job(redis_server, partition)
    code, lines, _ = run_events(capsys, *redis_args(redis_server, partition))
    assert code == 0
    assert len(lines) == 3
    assert all(
        job_id in line and "tenant=acme" in line and f"model={MODEL}" in line for line in lines
    )
    assert "new -> queued  attempts=0" in lines[0]
    assert "queued -> processing  attempts=1  worker=gpu-1" in lines[1]
    assert "processing -> completed  attempts=1  worker=gpu-1  error=-" in lines[2]


def test_shows_the_error_code_of_a_failure(
    redis_server: RedisServer, partition: str, capsys: pytest.CaptureFixture[str]
) -> None:
    finished_job(redis_server, partition, status="failed", error_code="HANDLER_ERROR")
    _, lines, _ = run_events(capsys, *redis_args(redis_server, partition))
    assert "processing -> failed" in lines[-1]
    assert lines[-1].endswith("error=HANDLER_ERROR")


def test_json_prints_one_parsable_object_per_event(
    redis_server: RedisServer, partition: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = finished_job(redis_server, partition)
    code, lines, _ = run_events(capsys, "--json", *redis_args(redis_server, partition))
    assert code == 0
    events = [json.loads(line) for line in lines]
    assert [(e["from"], e["to"]) for e in events] == [
        (None, "queued"),
        ("queued", "processing"),
        ("processing", "completed"),
    ]
    assert {e["job_id"] for e in events} == {job_id}
    assert events[1]["worker_id"] == "gpu-1"
    assert events[1]["attempts"] == 1


def test_job_filter_keeps_that_job_and_its_group_children(
    redis_server: RedisServer, partition: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = asyncio.run(_submit(redis_server.url, partition, JobSpec(model=MODEL)))
    group = asyncio.run(
        _submit(
            redis_server.url,
            partition,
            GroupSpec(children=(JobSpec(model=MODEL), JobSpec(model=MODEL))),
        )
    )
    code, lines, _ = run_events(
        capsys, "--json", "--job", group, *redis_args(redis_server, partition)
    )
    assert code == 0
    events = [json.loads(line) for line in lines]
    assert any(e["job_id"] == group for e in events)
    children = {e["job_id"] for e in events if e["parent_job_id"] == group}
    assert len(children) == 2
    assert all(other not in line for line in lines)


def test_reads_only_its_own_partition(
    redis_server: RedisServer, partition: str, capsys: pytest.CaptureFixture[str]
) -> None:
    finished_job(redis_server, partition)
    code, lines, _ = run_events(capsys, *redis_args(redis_server, partition + "-other"))
    assert code == 0
    assert lines == []


def test_redis_url_and_partition_come_from_the_environment(
    redis_server: RedisServer,
    partition: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id = finished_job(redis_server, partition)
    monkeypatch.setenv("JOBGATE_REDIS_URL", redis_server.url)
    monkeypatch.setenv("JOBGATE_REDIS_PARTITION", partition)
    code, lines, _ = run_events(capsys)
    assert code == 0
    assert len(lines) == 3
    assert job_id in lines[0]


def test_unreachable_redis_is_a_one_line_error_and_exit_1(
    capsys: pytest.CaptureFixture[str], timings: Timings
) -> None:
    started = time.monotonic()
    code, lines, err = run_events(capsys, "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert code == 1
    assert lines == []
    assert len(err.splitlines()) == 1
    assert err.startswith("jobgate events: error: ")
    timings("jobgate events: an unreachable Redis is an error", time.monotonic() - started)


def test_bad_url_is_a_one_line_error_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_events(capsys, "--redis-url", "http://example.invalid/")
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "unsupported --redis-url" in err


def test_missing_url_is_a_one_line_error_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOBGATE_REDIS_URL", raising=False)
    code, _, err = run_events(capsys)
    assert code == 2
    assert "--redis-url" in err
    assert len(err.splitlines()) == 1


class LineReader:
    """Collects a subprocess's stdout lines on a thread, so waits have deadlines."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        threading.Thread(target=self._pump, args=(process.stdout,), daemon=True).start()

    def _pump(self, stream: TextIO) -> None:
        for line in stream:
            self.lines.put(line)

    def read(self, count: int, timeout: float = 10.0) -> list[str]:
        deadline = time.monotonic() + timeout
        got: list[str] = []
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"got {len(got)} of {count} lines within {timeout}s: {got}")
            try:
                got.append(self.lines.get(timeout=remaining).rstrip("\n"))
            except queue.Empty:
                continue
        return got


@contextlib.contextmanager
def following(redis: RedisServer, partition: str) -> Iterator[subprocess.Popen[str]]:
    """`jobgate events --follow --json` as a subprocess, killed if still running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "jobgate.cli", "events", "--follow", "--json",
         *redis_args(redis, partition)],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def follower(redis_server: RedisServer, partition: str) -> Iterator[subprocess.Popen[str]]:
    with following(redis_server, partition) as process:
        yield process


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_follow_prints_the_backlog_then_new_events_until_a_signal_then_exits_0(
    redis_server: RedisServer,
    partition: str,
    follower: subprocess.Popen[str],
    stop_signal: signal.Signals,
) -> None:
    first = finished_job(redis_server, partition)
    lines = LineReader(follower)
    assert [json.loads(x)["job_id"] for x in lines.read(3)] == [first] * 3
    second = finished_job(redis_server, partition)
    assert [json.loads(x)["job_id"] for x in lines.read(3)] == [second] * 3
    follower.send_signal(stop_signal)
    assert follower.wait(timeout=10) == 0
    assert follower.stderr is not None
    assert "Traceback" not in follower.stderr.read()


def test_follow_exits_1_with_one_line_when_redis_goes_away(
    own_redis: RedisServer, partition: str
) -> None:
    finished_job(own_redis, partition)
    with following(own_redis, partition) as process:
        LineReader(process).read(3)
        own_redis.kill()
        assert process.wait(timeout=15) == 1
        assert process.stderr is not None
        err = process.stderr.read()
    assert err.startswith("jobgate events: error: ")
    assert len(err.splitlines()) == 1, err


async def _submit_many(url: str, partition: str, count: int) -> None:
    store = open_store(url, StoreSettings(), partition=partition)
    await store.open()
    try:
        for _ in range(count):
            await store.submit(SubmitRequest(tenant="acme", work=JobSpec(model=MODEL)))
    finally:
        await store.close()


def test_a_reader_that_stops_early_is_not_an_error(
    redis_server: RedisServer, partition: str
) -> None:
    # More output than a pipe buffer holds, so the write after `head` left fails.
    asyncio.run(_submit_many(redis_server.url, partition, 600))
    process = subprocess.Popen(
        [sys.executable, "-m", "jobgate.cli", "events", *redis_args(redis_server, partition)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert b"new -> queued" in process.stdout.readline()
    process.stdout.close()
    assert process.wait(timeout=20) == 0
    assert process.stderr.read() == b""
    process.stderr.close()


async def _submit_to_every_partition(url: str, partition: str, partitions: int) -> list[str]:
    store = open_store(url, StoreSettings(), partition=partition, partitions=partitions)
    await store.open()
    try:
        request = SubmitRequest(tenant="acme", work=JobSpec(model=MODEL, payload=b"hello"))
        # unkeyed submits take the partitions in turn
        return [(await store.submit(request)).job.id for _ in range(partitions)]
    finally:
        await store.close()


def test_lists_the_events_of_every_partition(
    redis_server: RedisServer, partition: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job_ids = asyncio.run(_submit_to_every_partition(redis_server.url, partition, 3))
    args = [*redis_args(redis_server, partition), "--redis-partitions", "3", "--json"]
    code, lines, _ = run_events(capsys, *args)
    assert code == 0
    assert sorted(json.loads(line)["job_id"] for line in lines) == sorted(job_ids)


def test_partitions_come_from_the_environment(
    redis_server: RedisServer,
    partition: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_ids = asyncio.run(_submit_to_every_partition(redis_server.url, partition, 2))
    monkeypatch.setenv("JOBGATE_REDIS_PARTITIONS", "2")
    code, lines, _ = run_events(capsys, *redis_args(redis_server, partition))
    assert code == 0
    assert len(lines) == len(job_ids)


@pytest.mark.parametrize("value", ["0", "1025", "many"])
def test_a_bad_partition_count_is_a_one_line_error_and_exit_2(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, _, err = run_events(capsys, "--redis-url", redis_server.url, "--redis-partitions", value)
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "--redis-partitions: expected" in err
