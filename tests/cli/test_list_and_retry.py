"""`jobgate list` and `jobgate retry` against the fake JobService: output, flags, exit codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf import timestamp_pb2
from google.rpc import code_pb2

from jobgate.cli._jobs import combined_filter, looks_retryable
from jobgate.cli._table import age
from jobgate.v1 import job_pb2, job_service_pb2
from tests.cli.fake_cli import FakeCli
from tests.client.fake_job_service import Fail, FakeJobService

S = job_pb2
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def stamp(moment: datetime) -> timestamp_pb2.Timestamp:
    value = timestamp_pb2.Timestamp()
    value.FromDatetime(moment)
    return value


def job(
    job_id: str, status: int = S.JOB_STATUS_FAILED, ago: timedelta | None = None, **fields: Any
) -> S.Job:
    created = datetime.now(UTC) - (ago or timedelta(minutes=3, seconds=5))
    return S.Job(id=job_id, status=status, create_time=stamp(created), **fields)  # type: ignore[arg-type]


def page(*ids: str, token: str = "") -> job_service_pb2.ListJobsResponse:
    return job_service_pb2.ListJobsResponse(jobs=[job(i) for i in ids], next_page_token=token)


def sent_filters(service: FakeJobService) -> list[str]:
    return [seen.request.filter for seen in service.calls("ListJobs")]


# ---------------------------------------------------------------- list


async def test_list_prints_a_table_with_status_age_attempts_and_error(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.jobs = [
        job(
            "01JF",
            model="text-stats",
            pool="onprem",
            attempts=3,
            max_attempts=3,
            error_code="HANDLER_ERROR",
            kind=S.JOB_KIND_SINGLE,
        ),
        job("01JG", S.JOB_STATUS_QUEUED, ago=timedelta(hours=2, minutes=1), kind=S.JOB_KIND_GROUP),
    ]

    ran = await fake_cli.run("list")

    assert ran.code == 0
    header, first, second = ran.out.splitlines()
    assert header.split() == ["ID", "STATUS", "MODEL", "POOL", "KIND", "AGE", "ATTEMPTS", "ERROR"]
    assert " ".join(first.split()) == "01JF FAILED text-stats onprem single 3m 3/3 HANDLER_ERROR"
    assert second.split() == ["01JG", "QUEUED", "-", "any", "group", "2h", "0"]
    assert "\x1b[" not in ran.out  # no colour when stdout is not a terminal


async def test_list_colours_the_status_on_a_terminal(
    service: FakeJobService, fake_cli: FakeCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    service.jobs = [job("01JF"), job("01JC", S.JOB_STATUS_COMPLETED)]

    ran = await fake_cli.run_on_terminal(monkeypatch, "list")

    assert "\x1b[31mFAILED   " in ran.out and "\x1b[32mCOMPLETED" in ran.out


async def test_list_json_prints_one_job_object_a_line(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.jobs = [job("01JA", model="m"), job("01JB", model="m")]

    ran = await fake_cli.run("list", "--json")

    lines = [json.loads(line) for line in ran.out.splitlines()]
    assert [(j["id"], j["status"], j["model"]) for j in lines] == [
        ("01JA", "JOB_STATUS_FAILED", "m"),
        ("01JB", "JOB_STATUS_FAILED", "m"),
    ]


async def test_status_and_model_are_anded_onto_the_filter(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    ran = await fake_cli.run(
        "list", "--filter", "labels.team = a", "--status", "failed", "--model", "text-stats"
    )

    assert ran.code == 0
    assert sent_filters(service) == ['labels.team = a AND status = FAILED AND model = "text-stats"']


def test_a_filter_value_is_quoted_with_its_quotes_and_backslashes_escaped() -> None:
    assert combined_filter("", None, 'a"b\\c') == 'model = "a\\"b\\\\c"'
    assert combined_filter("  ", "FAILED", None) == "status = FAILED"
    assert combined_filter("", None, None) == ""


async def test_list_stops_at_the_limit_across_pages_and_says_more_may_match(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.script(
        "ListJobs",
        page("01J1", "01J2", token="t1"),
        page("01J3", "01J4", token="t2"),
        page("01J5", "01J6", token="t3"),
    )

    ran = await fake_cli.run("list", "--limit", "5")

    shown = [line.split()[0] for line in ran.out.splitlines()[1:]]
    assert shown == ["01J1", "01J2", "01J3", "01J4", "01J5"]
    requests = [seen.request for seen in service.calls("ListJobs")]
    assert [(r.page_token, r.page_size) for r in requests] == [("", 5), ("t1", 5), ("t2", 5)]
    assert "more may match" in ran.err


async def test_list_limit_0_walks_every_page(service: FakeJobService, fake_cli: FakeCli) -> None:
    service.jobs = [job(f"01J{i:04d}") for i in range(1200)]

    ran = await fake_cli.run("list", "--limit", "0", "--json")

    assert len(ran.out.splitlines()) == 1200
    assert len(service.calls("ListJobs")) == 2 and ran.err == ""


async def test_list_with_no_match_says_so(fake_cli: FakeCli) -> None:
    ran = await fake_cli.run("list", "--status", "PARTIAL")

    assert (ran.code, ran.out) == (0, "no jobs match\n")


async def test_a_filter_the_server_refuses_is_one_line_and_exit_3(fake_cli: FakeCli) -> None:
    ran = await fake_cli.run("list", "--filter", "colour = red")

    assert ran.code == 3
    assert ran.err.startswith("jobgate: error: INVALID_ARGUMENT")
    assert "filter:" in ran.err and len(ran.err.splitlines()) == 1


async def test_an_unknown_status_is_a_usage_error(fake_cli: FakeCli) -> None:
    with pytest.raises(SystemExit) as exited:
        await fake_cli.run("list", "--status", "BROKEN")

    assert exited.value.code == 2


@pytest.mark.parametrize(
    ("ago", "shown"),
    [
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=3, seconds=59), "3m"),
        (timedelta(hours=2, minutes=59), "2h"),
        (timedelta(days=5, hours=23), "5d"),
        (timedelta(seconds=-30), "0s"),  # a clock a little ahead of ours
    ],
)
def test_age_is_shown_in_its_largest_whole_unit(ago: timedelta, shown: str) -> None:
    assert age(stamp(NOW - ago), NOW) == shown


def test_an_unset_time_has_no_age() -> None:
    assert age(timestamp_pb2.Timestamp(), NOW) == "-"


# ---------------------------------------------------------------- retry


async def test_retry_ids_retries_each_with_a_line_per_job_and_a_summary(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.jobs = [job("01JA"), job("01JB", S.JOB_STATUS_CANCELLED)]

    ran = await fake_cli.run("retry", "01JA", "01JB")

    assert ran.code == 0
    assert ran.out.splitlines() == [
        "retried 01JA QUEUED (1/2)",
        "retried 01JB QUEUED (2/2)",
        "retried 2 of 2 jobs",
    ]
    assert [s.request.job_id for s in service.calls("RetryJob")] == ["01JA", "01JB"]


async def test_a_refused_job_is_summarised_with_its_reason_and_exits_1(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.jobs = [job("01JA"), job("01JC", S.JOB_STATUS_COMPLETED)]

    ran = await fake_cli.run("retry", "01JA", "01JC", "01JNOPE")

    assert ran.code == 1
    lines = ran.out.splitlines()
    assert lines[1] == "refused 01JC: JOB_NOT_RETRYABLE (2/3)"
    assert lines[3] == "retried 1 of 3 jobs, refused 2:"
    assert lines[4].split() == ["REFUSED", "REASON", "MESSAGE"]
    assert lines[5].split()[:2] == ["01JC", "JOB_NOT_RETRYABLE"]
    assert lines[6].split()[:2] == ["01JNOPE", "JOB_NOT_FOUND"]


async def test_retry_filter_walks_list_jobs_and_retries_each_match(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.jobs = [job(f"01JF{i}", model="m") for i in range(3)]
    service.jobs.insert(1, job("01JC", S.JOB_STATUS_COMPLETED, model="m"))

    ran = await fake_cli.run("retry", "--status", "FAILED", "--model", "m")

    assert ran.code == 0, ran.out
    assert sent_filters(service) == ['status = FAILED AND model = "m"']
    assert [s.request.job_id for s in service.calls("RetryJob")] == ["01JF0", "01JF1", "01JF2"]
    assert ran.out.splitlines()[-1] == "retried 3 of 3 jobs"


async def test_retry_collects_every_page_before_retrying_any_job(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.script("ListJobs", page("01J1", token="t1"), page("01J1", "01J2"))

    await fake_cli.run("retry", "--filter", "status = FAILED")

    methods = [seen.method for seen in service.seen]
    assert methods == ["ListJobs", "ListJobs", "RetryJob", "RetryJob"]  # 01J1 once


async def test_dry_run_shows_what_would_be_retried_and_changes_nothing(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.jobs = [job("01JF", model="m"), job("01JC", S.JOB_STATUS_COMPLETED, model="m")]

    ran = await fake_cli.run("retry", "--model", "m", "--dry-run")

    assert ran.code == 0
    header, first, second, last = ran.out.splitlines()
    assert header.split()[-1] == "WOULD"
    assert first.split()[:2] == ["01JF", "FAILED"] and first.endswith("retry")
    assert second.endswith("refuse: JOB_NOT_RETRYABLE")
    assert last == "dry run, nothing changed: would retry 1, would refuse 1"
    assert not service.calls("RetryJob")
    assert service.jobs[0].status == S.JOB_STATUS_FAILED


async def test_dry_run_of_ids_reads_each_job(service: FakeJobService, fake_cli: FakeCli) -> None:
    service.script("Get", Fail(code_pb2.NOT_FOUND, "JOB_NOT_FOUND"))

    ran = await fake_cli.run("retry", "01JNOPE", "01JQ", "--dry-run", "--json")

    nope, queued = (json.loads(line) for line in ran.out.splitlines())
    assert nope == {"job_id": "01JNOPE", "outcome": "would_refuse", "reason": "JOB_NOT_FOUND"}
    assert (queued["outcome"], queued["reason"]) == ("would_refuse", "JOB_NOT_RETRYABLE")
    assert not service.calls("RetryJob")


async def test_retry_json_is_one_outcome_a_job(service: FakeJobService, fake_cli: FakeCli) -> None:
    service.jobs = [job("01JA"), job("01JC", S.JOB_STATUS_COMPLETED)]

    ran = await fake_cli.run("retry", "01JA", "01JC", "--json")

    retried, refused = (json.loads(line) for line in ran.out.splitlines())
    assert (retried["outcome"], retried["job"]["status"]) == ("retried", "JOB_STATUS_QUEUED")
    assert (refused["outcome"], refused["reason"]) == ("refused", "JOB_NOT_RETRYABLE")
    assert ran.code == 1


async def test_retry_draws_a_progress_bar_on_a_terminal(
    service: FakeJobService, fake_cli: FakeCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.jobs = [job(f"01J{i}") for i in range(4)]

    ran = await fake_cli.run_on_terminal(monkeypatch, "retry", *(j.id for j in service.jobs))

    redraws = ran.out.split("\r")
    assert "  25% 1/4, refused 0" in redraws[1]
    assert "] 100% 4/4, refused 0" in redraws[4]
    assert ran.out.endswith("\rretried 4 of 4 jobs\n")  # the bar is cleared first
    assert "retried 01J" not in ran.out  # no per-job lines on a terminal


async def test_losing_the_caller_stops_the_run_saying_how_far_it_got(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.jobs = [job(f"01J{i}") for i in range(3)]
    ok = job_service_pb2.RetryJobResponse(job=job("01J0", S.JOB_STATUS_QUEUED))
    service.script("RetryJob", ok, Fail(code_pb2.UNAUTHENTICATED))

    ran = await fake_cli.run("retry", "01J0", "01J1", "01J2")

    assert ran.code == 3
    assert ran.out.splitlines()[-1] == "retried 1 of 3 jobs (stopped; 2 not tried)"
    assert ran.err.startswith("jobgate: error: UNAUTHENTICATED")
    assert len(service.calls("RetryJob")) == 2


@pytest.mark.parametrize(
    "args", [(), ("01JA", "--filter", "status = FAILED"), ("01JA", "--status", "FAILED")]
)
async def test_retry_wants_ids_or_a_filter_but_not_both(
    fake_cli: FakeCli, args: tuple[str, ...]
) -> None:
    ran = await fake_cli.run("retry", *args)

    assert ran.code == 2 and ran.err.startswith("jobgate: error: give ")


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (S.JOB_STATUS_FAILED, S.JOB_KIND_SINGLE, True),
        (S.JOB_STATUS_CANCELLED, S.JOB_KIND_UNSPECIFIED, True),
        (S.JOB_STATUS_PARTIAL, S.JOB_KIND_GROUP, True),
        (S.JOB_STATUS_FAILED, S.JOB_KIND_CHILD, False),
        (S.JOB_STATUS_COMPLETED, S.JOB_KIND_SINGLE, False),
        (S.JOB_STATUS_QUEUED, S.JOB_KIND_GROUP, False),
    ],
)
def test_the_dry_run_follows_the_retry_rules_of_design(
    status: int, kind: int, retryable: bool
) -> None:
    assert looks_retryable(S.Job(status=status, kind=kind)) is retryable  # type: ignore[arg-type]
