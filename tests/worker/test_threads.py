"""Handler threads are reused from job to job, and a stuck handler starves nobody."""

from __future__ import annotations

import threading

import pytest

from jobgate import JobClient, JobContext
from jobgate.v1 import job_pb2
from jobgate.worker._threads import HandlerThreads
from tests.e2e.harness import Deployment
from tests.worker.conftest import running_worker
from tests.worker.test_daemon import finished


def _run_and_wait(threads: HandlerThreads, work: threading.Event) -> str:
    ran_on: list[str] = []
    done = threading.Event()

    def body() -> None:
        ran_on.append(threading.current_thread().name)
        work.wait(10)
        done.set()

    threads.run(body)
    assert done.wait(10)
    return ran_on[0]


def test_sequential_work_reuses_one_thread() -> None:
    threads = HandlerThreads()
    go = threading.Event()
    go.set()
    names = {_run_and_wait(threads, go) for _ in range(20)}
    assert threads.size == 1
    assert len(names) == 1


def test_work_behind_a_stuck_one_runs_on_a_new_thread() -> None:
    threads = HandlerThreads()
    stuck, stuck_started = threading.Event(), threading.Event()

    def never_returns() -> None:
        stuck_started.set()
        stuck.wait(10)

    threads.run(never_returns)
    assert stuck_started.wait(10)
    go = threading.Event()
    go.set()
    _run_and_wait(threads, go)
    assert threads.size == 2
    stuck.set()


def test_handler_threads_are_daemon_threads_so_a_stuck_one_never_blocks_exit() -> None:
    threads = HandlerThreads()
    seen: list[bool] = []
    done = threading.Event()

    def body() -> None:
        seen.append(threading.current_thread().daemon)
        done.set()

    threads.run(body)
    assert done.wait(10)
    assert seen == [True]


async def test_a_worker_runs_sequential_sync_jobs_on_one_reused_thread(
    server: Deployment, client: JobClient, model: str
) -> None:
    thread_names: set[str] = set()

    def handler(ctx: JobContext) -> str:
        thread_names.add(threading.current_thread().name)
        return "ok"

    async with running_worker(server.worker_target, model, handler, concurrency=1) as worker:
        for _ in range(5):
            job = await client.submit(model, b"x")
            assert (await finished(client, job.id)).status == job_pb2.JOB_STATUS_COMPLETED
        assert worker.threads.size == 1
    assert len(thread_names) == 1


def test_work_whose_thread_cannot_start_is_never_run_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads = HandlerThreads()
    ran: list[str] = []

    def cannot_start(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", cannot_start)
        with pytest.raises(RuntimeError):
            threads.run(lambda: ran.append("refused"))
    assert threads.size == 0
    go = threading.Event()
    go.set()
    _run_and_wait(threads, go)
    assert ran == []  # the refused work did not ride the next thread
    assert threads.size == 1
