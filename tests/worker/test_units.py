"""Worker internals that need no server: lease arithmetic, outcomes, handler loading."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jobgate import JobContext
from jobgate.v1 import job_pb2, worker_service_pb2
from jobgate.worker import HandlerLoadError, load_handler
from jobgate.worker._job import MIN_LEASE, is_async_handler, lease_length, to_outcome


def claimed(expire_in: float, claimed_ago: float | None) -> worker_service_pb2.ClaimedJob:
    now = time.time()
    job = job_pb2.Job(id="J")
    if claimed_ago is not None:
        job.update_time.FromNanoseconds(int((now - claimed_ago) * 1e9))
    result = worker_service_pb2.ClaimedJob(job=job, lease_id="L")
    result.lease_expire_time.FromNanoseconds(int((now + expire_in) * 1e9))
    return result


def test_lease_length_is_measured_on_the_stores_clock() -> None:
    # The store's clock says the lease is 30 s long; the local clock agrees.
    assert lease_length(claimed(expire_in=30, claimed_ago=0)) == pytest.approx(30, abs=0.5)


def test_lease_length_errs_early_when_the_local_clock_is_ahead() -> None:
    # A 30 s lease, but the local clock runs 20 s ahead: only 10 s seem left locally.
    assert lease_length(claimed(expire_in=10, claimed_ago=20)) == pytest.approx(10, abs=0.5)


def test_lease_length_errs_early_when_the_local_clock_is_behind() -> None:
    # The local clock runs 20 s behind: the deadline looks 50 s away, the lease is 30 s.
    assert lease_length(claimed(expire_in=50, claimed_ago=-20)) == pytest.approx(30, abs=0.5)


def test_lease_length_never_drops_below_the_floor() -> None:
    assert lease_length(claimed(expire_in=-5, claimed_ago=None)) == MIN_LEASE


def context() -> JobContext:
    return JobContext(job_pb2.Job(id="J"), b"")


def test_str_results_are_utf8_text() -> None:
    outcome = to_outcome("héllo", context())

    assert outcome.status == job_pb2.JOB_STATUS_COMPLETED
    assert outcome.result == "héllo".encode()
    assert outcome.result_content_type == "text/plain; charset=utf-8"


def test_a_result_content_type_set_by_the_handler_wins() -> None:
    ctx = context()
    ctx.result_content_type = "image/png"

    assert to_outcome(b"\x89PNG", ctx).result_content_type == "image/png"


def test_an_unsupported_return_type_is_a_handler_error() -> None:
    outcome = to_outcome({"a": 1}, context())

    assert (outcome.status, outcome.error_code) == (job_pb2.JOB_STATUS_FAILED, "HANDLER_ERROR")
    assert "returned dict" in outcome.error_message


def test_report_clamps_progress_and_keeps_the_stage_when_none_is_given() -> None:
    ctx = context()
    ctx.report(0.3, "infer")
    ctx.report(7)

    assert ctx.progress == (1.0, "infer")


def test_async_functions_and_objects_are_recognised() -> None:
    class Model:
        async def __call__(self, ctx: JobContext) -> str:
            return ""

    async def handler(ctx: JobContext) -> str:
        return ""

    assert is_async_handler(handler)
    assert is_async_handler(Model())
    assert not is_async_handler(lambda ctx: None)


def test_handlers_load_from_a_module_or_a_file(tmp_path: Path) -> None:
    path = tmp_path / "my_handlers.py"
    path.write_text("def run(ctx):\n    return 'ran'\n")

    assert load_handler("examples.handlers:text_stats").__name__ == "text_stats"
    assert load_handler(f"{path}:run")(context()) == "ran"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "module:function"),
        ("no_such_module_xyz:f", "cannot import"),
        ("examples.handlers:missing", "no attribute"),
        ("examples.handlers:STAGES", "not callable"),
    ],
)
def test_a_bad_handler_spec_is_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises(HandlerLoadError, match=message):
        load_handler(spec)
