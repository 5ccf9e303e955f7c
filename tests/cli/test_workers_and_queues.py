"""`jobgate workers` and `jobgate queues` (and its --watch loop) against the fake JobService."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf import timestamp_pb2
from google.rpc import code_pb2

from jobgate.cli import build_parser
from jobgate.cli._fleet import CLEAR_SCREEN, HOME, held_jobs, watch_queues
from jobgate.errors import PermissionDeniedError, UnavailableError
from jobgate.v1 import job_pb2
from tests.cli.fake_cli import FakeCli
from tests.client.fake_job_service import Fail, FakeJobService

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def stamp(ago: timedelta, now: datetime | None = None) -> timestamp_pb2.Timestamp:
    value = timestamp_pb2.Timestamp()
    value.FromDatetime((now or datetime.now(UTC)) - ago)
    return value


def queue(model: str, priority: int, pool: str = "", queued: int = 0) -> job_pb2.QueueStats:
    return job_pb2.QueueStats(model=model, priority=priority, pool=pool, queued=queued)  # type: ignore[arg-type]


# ---------------------------------------------------------------- workers


async def test_workers_prints_pool_models_held_jobs_and_last_seen(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    seen_4s_ago, seen_90s_ago = stamp(timedelta(seconds=4)), stamp(timedelta(seconds=90))
    service.workers = [
        job_pb2.Worker(
            worker_id="gpu-a-1",
            pool="onprem",
            models=["text-stats", "whisper"],
            job_ids=["01JA", "01JB", "01JC"],
            last_seen_time=seen_4s_ago,
        ),
        job_pb2.Worker(
            worker_id="gpu-b-7", pool="cloud", models=["text-stats"], last_seen_time=seen_90s_ago
        ),
    ]

    ran = await fake_cli.run("workers")

    assert ran.code == 0
    header, first, second = ran.out.splitlines()
    assert header.split() == ["WORKER", "POOL", "MODELS", "JOBS", "LAST", "SEEN"]
    assert " ".join(first.split()) == "gpu-a-1 onprem text-stats,whisper 3: 01JA, 01JB +1 4s ago"
    assert second.split() == ["gpu-b-7", "cloud", "text-stats", "0", "1m", "ago"]


def test_a_worker_row_names_two_held_jobs_and_counts_the_rest() -> None:
    assert held_jobs([]) == "0"
    assert held_jobs(["A"]) == "1: A"
    assert held_jobs(["A", "B"]) == "2: A, B"
    assert held_jobs(["A", "B", "C", "D"]) == "4: A, B +2"


async def test_workers_json_prints_one_worker_a_line(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.workers = [
        job_pb2.Worker(worker_id="w1", job_ids=["01JA"]),
        job_pb2.Worker(worker_id="w2"),
    ]

    ran = await fake_cli.run("workers", "--json")

    lines = [json.loads(line) for line in ran.out.splitlines()]
    assert lines == [{"worker_id": "w1", "job_ids": ["01JA"]}, {"worker_id": "w2"}]


async def test_no_workers_says_so(fake_cli: FakeCli) -> None:
    ran = await fake_cli.run("workers")

    assert ran.out == "no workers seen in the last 120 s\n"


async def test_a_client_token_asking_for_workers_is_refused_with_exit_3(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.script("ListWorkers", Fail(code_pb2.PERMISSION_DENIED))

    ran = await fake_cli.run("workers")

    assert ran.code == 3 and ran.err.startswith("jobgate: error: PERMISSION_DENIED")


# ---------------------------------------------------------------- queues


async def test_queues_prints_one_row_per_queue_in_claim_order(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.queues = [
        queue("text-stats", job_pb2.PRIORITY_BATCH, "onprem", queued=120),
        queue("text-stats", job_pb2.PRIORITY_INTERACTIVE, queued=3),
        queue("asr", job_pb2.PRIORITY_SYSTEM),
    ]
    service.queues[0].processing = 4
    service.queues[0].oldest_queued_time.CopyFrom(stamp(timedelta(minutes=12, seconds=1)))

    ran = await fake_cli.run("queues")

    assert ran.code == 0
    lines = ran.out.splitlines()
    assert lines[0].split() == ["MODEL", "PRIORITY", "POOL", "QUEUED", "PROCESSING", "OLDEST"]
    assert [line.split() for line in lines[1:]] == [
        ["asr", "system", "any", "0", "0", "-"],
        ["text-stats", "interactive", "any", "3", "0", "-"],
        ["text-stats", "batch", "onprem", "120", "4", "12m"],
    ]
    assert lines[2].index(" 3 ") > lines[3].index("120")  # counts line up on the right


async def test_queues_json_prints_one_queue_a_line(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    service.queues = [queue("m", job_pb2.PRIORITY_BATCH, "onprem", queued=2)]

    ran = await fake_cli.run("queues", "--json")

    [line] = [json.loads(line) for line in ran.out.splitlines()]
    assert line == {"model": "m", "priority": "PRIORITY_BATCH", "pool": "onprem", "queued": "2"}


def test_watch_without_a_number_redraws_every_2_seconds() -> None:
    parser = build_parser(["queues"])

    assert parser.parse_args(["queues", "--watch"]).watch == 2.0
    assert parser.parse_args(["queues", "--watch", "5"]).watch == 5.0
    assert parser.parse_args(["queues"]).watch is None


@pytest.mark.parametrize("args", [("--watch", "--json"), ("--watch", "0")])
async def test_watch_refuses_json_and_a_period_of_zero(
    fake_cli: FakeCli, args: tuple[str, ...]
) -> None:
    ran = await fake_cli.run("queues", *args)

    assert ran.code == 2 and ran.err.startswith("jobgate: error: --watch")


class Ticks:
    """Stands in for the queue service and the clock: each fetch answers the next list."""

    def __init__(self, *answers: list[job_pb2.QueueStats] | Exception) -> None:
        self.answers = list(answers)
        self.slept: list[float] = []

    async def fetch(self) -> list[job_pb2.QueueStats]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


async def test_watch_redraws_the_table_in_place_on_each_tick() -> None:
    ticks = Ticks(
        [queue("m", job_pb2.PRIORITY_BATCH, queued=5)],
        [queue("m", job_pb2.PRIORITY_BATCH, queued=2)],
    )
    out = io.StringIO()

    await watch_queues(
        ticks.fetch, out, interval=3, live=True, sleep=ticks.sleep, now=lambda: NOW, ticks=2
    )

    screen = out.getvalue()
    assert screen.startswith(CLEAR_SCREEN + HOME) and screen.count(CLEAR_SCREEN) == 1
    first, second = screen.split(HOME)[1:]
    assert "every 3s" in first and "Ctrl-C" in first
    assert "  5  " in first and "  2  " in second
    assert ticks.slept == [3]


async def test_watch_off_a_terminal_prints_one_plain_table_after_another() -> None:
    ticks = Ticks([queue("m", job_pb2.PRIORITY_BATCH, queued=5)], [])
    out = io.StringIO()

    await watch_queues(
        ticks.fetch, out, interval=2, live=False, sleep=ticks.sleep, now=lambda: NOW, ticks=2
    )

    assert "\x1b" not in out.getvalue()
    assert out.getvalue().count("every 2s") == 2
    assert out.getvalue().endswith("no queued or processing jobs\n\n")


async def test_watch_shows_a_lost_server_and_asks_again_at_the_next_tick() -> None:
    ticks = Ticks(UnavailableError("gone"), [queue("m", job_pb2.PRIORITY_BATCH)])
    out = io.StringIO()

    await watch_queues(
        ticks.fetch, out, interval=2, live=False, sleep=ticks.sleep, now=lambda: NOW, ticks=2
    )

    first, second = out.getvalue().split("every 2s")[1:]
    assert "UNAVAILABLE: gone (asking again in 2s)" in first
    assert "MODEL" in second


async def test_watch_ends_on_an_error_that_waiting_cannot_fix() -> None:
    ticks = Ticks(PermissionDeniedError("client role"))

    with pytest.raises(PermissionDeniedError):
        await watch_queues(
            ticks.fetch, io.StringIO(), interval=2, live=True, sleep=ticks.sleep, ticks=2
        )
