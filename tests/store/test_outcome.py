"""The embedded store knows a repeated SetResult by its outcome: status, retryable, code, digest."""

from __future__ import annotations

from store.memory.record import outcome_of, same_outcome
from store.model import JobStatus, ResultReport


def test_the_same_report_is_the_same_outcome() -> None:
    report = ResultReport(JobStatus.COMPLETED, b"out")

    assert same_outcome(outcome_of(report), outcome_of(report), report.result)


def test_another_result_is_another_outcome() -> None:
    first, second = ResultReport(JobStatus.COMPLETED, b"a"), ResultReport(JobStatus.COMPLETED, b"b")

    assert not same_outcome(outcome_of(first), outcome_of(second), second.result)


def test_another_status_with_the_same_result_is_another_outcome() -> None:
    failed = ResultReport(JobStatus.FAILED, error_code="E")
    completed = ResultReport(JobStatus.COMPLETED)

    assert not same_outcome(outcome_of(failed), outcome_of(completed), completed.result)


def test_an_outcome_recorded_with_the_whole_result_still_matches() -> None:
    # records written before outcomes kept a digest hold the result itself
    report = ResultReport(JobStatus.COMPLETED, b"out")
    recorded = (JobStatus.COMPLETED, False, "", b"out")

    assert same_outcome(recorded, outcome_of(report), report.result)


def test_no_recorded_outcome_matches_nothing() -> None:
    report = ResultReport(JobStatus.COMPLETED, b"out")

    assert not same_outcome(None, outcome_of(report), report.result)
