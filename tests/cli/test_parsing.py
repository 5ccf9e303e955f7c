"""CLI input parsing and rendering, in-process (no server)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

from jobgate.cli import build_parser
from jobgate.cli._client import UsageError, parse_labels, read_batch, read_group
from jobgate.cli._render import ProgressLine, progress_bar, status_text
from jobgate.v1 import job_pb2


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_group_file_may_be_a_json_list(tmp_path: Path) -> None:
    path = write(tmp_path, "g.json", json.dumps([{"model": "a", "data": "x"}, {"model": "b"}]))

    children = read_group(path, None)

    assert [(c.model, c.payload) for c in children] == [("a", b"x"), ("b", b"")]


def test_group_file_may_be_an_object_with_children(tmp_path: Path) -> None:
    spec = {"children": [{"data": "x", "labels": {"page": 1}}]}
    path = write(tmp_path, "g.json", json.dumps(spec))

    [child] = read_group(path, "default-model")

    assert child.model == "default-model"
    assert dict(child.labels) == {"page": "1"}


def test_group_file_may_be_json_lines_with_binary_payloads(tmp_path: Path) -> None:
    encoded = base64.b64encode(b"\x00\xff").decode()
    lines = [
        json.dumps({"model": "a", "payload_b64": encoded, "content_type": "image/png"}),
        json.dumps({"model": "a", "data": "text"}),
    ]
    path = write(tmp_path, "g.jsonl", "\n".join(lines) + "\n")

    first, second = read_group(path, None)

    assert (first.payload, first.content_type) == (b"\x00\xff", "image/png")
    assert second.content_type == "text/plain; charset=utf-8"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json at all", "neither JSON nor JSON lines"),
        ("[]", "non-empty list"),
        ('[{"data": "x"}]', "no model"),
        ('[{"model": "a", "payload_b64": "%%%"}]', "not base64"),
        ('[{"model": "a", "labels": [1]}]', "labels must be an object"),
        ('[{"model": "a", "max_attempts": "many"}]', "max_attempts must be a whole number"),
    ],
)
def test_a_malformed_group_file_is_a_usage_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        read_group(write(tmp_path, "g.json", text), None)


def test_batch_file_is_one_submit_per_line_with_its_line_number(tmp_path: Path) -> None:
    lines = [
        json.dumps({"model": "a", "data": "x", "idempotency_key": "k1"}),
        "",
        json.dumps({"data": "y", "priority": "interactive"}),
    ]
    path = write(tmp_path, "b.jsonl", "\n".join(lines) + "\n")

    (first_line, first), (second_line, second) = read_batch(path, "default-model")

    assert (first_line, first.idempotency_key, first.job.model) == (1, "k1", "a")
    assert (second_line, second.job.model, second.job.payload) == (3, "default-model", b"y")
    assert second.priority == job_pb2.PRIORITY_INTERACTIVE


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"model": "a"}\nnot json\n', "line 2 is not JSON"),
        ('{"model": "a"}\n\n{"data": "x"}\n', "line 3: no model"),
        ('{"model": "a", "priority": "urgent"}\n', "line 1: unknown priority"),
        ("\n\n", "no jobs"),
    ],
)
def test_a_bad_batch_line_is_a_usage_error_naming_its_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        read_batch(write(tmp_path, "b.jsonl", text), None)


def test_labels_are_key_value_pairs() -> None:
    assert parse_labels(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(UsageError):
        parse_labels(["novalue"])


def test_the_parser_knows_every_client_command() -> None:
    parser = build_parser()

    args = parser.parse_args(["submit", "--model", "m", "--data", "x", "--label", "k=v"])
    assert (args.model, args.data, args.label, args.priority) == ("m", "x", ["k=v"], "batch")
    assert parser.parse_args(["watch", "ID"]).job_id == "ID"
    assert parser.parse_args(["cancel", "ID", "--reason", "r"]).reason == "r"
    worker = parser.parse_args(
        ["worker", "--model", "a", "--model", "b", "--handler", "m:f", "--concurrency", "3"]
    )
    assert (worker.model, worker.concurrency) == (["a", "b"], 3)


def test_file_and_data_cannot_both_be_given() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["submit", "--model", "m", "--data", "x", "--file", "f"])


def test_progress_bar_fills_in_proportion() -> None:
    assert progress_bar(0.5, width=10) == "[#####-----]  50%"
    assert progress_bar(1.7, width=4) == "[####] 100%"


def test_a_queued_job_shows_its_queue_position() -> None:
    job = job_pb2.Job(id="J", status=job_pb2.JOB_STATUS_QUEUED, queue_position=3)

    assert status_text(job) == "QUEUED position 3"


def test_a_running_job_shows_progress_and_stage() -> None:
    job = job_pb2.Job(id="J", status=job_pb2.JOB_STATUS_PROCESSING, progress=0.25, stage="infer")

    assert status_text(job).endswith("25% PROCESSING infer")


def test_the_live_line_redraws_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    line = ProgressLine(out, live=True)
    line.update(job_pb2.Job(status=job_pb2.JOB_STATUS_QUEUED, queue_position=1))
    line.update(job_pb2.Job(status=job_pb2.JOB_STATUS_PROCESSING, progress=0.5))
    line.finish(job_pb2.Job(id="J", status=job_pb2.JOB_STATUS_COMPLETED))

    assert out.getvalue().count("\r") >= 3
    assert out.getvalue().endswith("J COMPLETED (0 bytes of result)\n")
