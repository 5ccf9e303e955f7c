"""`jobgate submit | get | watch | cancel` end to end, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Cli
from tests.helpers import wait_until


def submitted_id(cli: Cli, *args: str) -> str:
    result = cli.run("submit", "--json", *args)
    assert result.returncode == 0, result.stderr
    job_id: str = json.loads(result.stdout)["job"]["id"]
    return job_id


def test_submit_wait_follows_the_job_to_completed(cli: Cli) -> None:
    result = cli.run("submit", "--model", "cli-echo", "--data", "hello", "--wait")

    assert result.returncode == 0, result.stderr
    first, *_, last = result.stdout.strip().splitlines()
    assert first.startswith("submitted ") and "cli-echo QUEUED" in first
    assert last.endswith("COMPLETED (5 bytes of text/plain; charset=utf-8)")


def test_get_shows_the_job_and_its_text_result(cli: Cli) -> None:
    job_id = submitted_id(cli, "--model", "cli-echo", "--data", "some text", "--label", "a=b")
    cli.run("watch", job_id)

    result = cli.run("get", job_id)

    assert result.returncode == 0
    assert f"job       {job_id} (single)" in result.stdout
    assert "status    COMPLETED" in result.stdout
    assert "labels    a=b" in result.stdout
    assert result.stdout.rstrip().endswith("some text")


def test_get_json_is_the_job_for_scripts(cli: Cli) -> None:
    job_id = submitted_id(cli, "--model", "cli-echo", "--data", "x", "--priority", "interactive")

    job = json.loads(cli.run("get", job_id, "--json").stdout)

    assert job["id"] == job_id
    assert job["model"] == "cli-echo"
    assert job["priority"] == "PRIORITY_INTERACTIVE"


def test_get_output_writes_the_raw_result(cli: Cli, tmp_path: Path) -> None:
    source = tmp_path / "in.bin"
    source.write_bytes(bytes(range(256)))
    job_id = submitted_id(cli, "--model", "cli-echo", "--file", str(source))
    cli.run("watch", job_id)

    assert cli.run("get", job_id, "--output", str(tmp_path / "out.bin")).returncode == 0
    assert (tmp_path / "out.bin").read_bytes() == source.read_bytes()


def test_watch_shows_each_stage_with_its_progress_then_the_outcome(cli: Cli) -> None:
    # Each stage outlasts the worker's progress interval (0.5 s) by enough (0.7 s)
    # that a loaded machine still sends each; --wait follows from submission on.
    args = ("--model", "cli-staged", "--data", "good", "--label", "pause=1.2")

    result = cli.run("submit", *args, "--wait")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    shown_stages = [line.split()[-1] for line in lines if "PROCESSING" in line]
    assert [s for s in dict.fromkeys(shown_stages) if s != "PROCESSING"] == [
        "download",
        "preprocess",
        "infer",
        "postprocess",
    ]
    assert any("%" in line and "[" in line for line in lines)
    assert lines[-1].split()[1] == "COMPLETED"


def test_watch_exits_1_with_the_error_when_the_job_fails(cli: Cli) -> None:
    job_id = submitted_id(cli, "--model", "cli-fail", "--data", "x", "--max-attempts", "1")

    result = cli.run("watch", job_id)

    assert result.returncode == 1
    assert f"{job_id} FAILED: HANDLER_ERROR: ValueError: cannot handle b'x'" in result.stdout


def test_watch_shows_the_queue_position_and_exits_1_when_cancelled(cli: Cli) -> None:
    job_id = submitted_id(cli, "--model", "cli-nobody", "--data", "x")
    watch = cli.popen("watch", job_id)
    assert watch.stdout is not None
    first_line = watch.stdout.readline()

    cancel = cli.run("cancel", job_id, "--reason", "changed my mind")
    rest, _ = watch.communicate(timeout=20)

    assert first_line.strip() == "QUEUED position 0"
    assert cancel.returncode == 0
    assert cancel.stdout.startswith(f"cancelled {job_id}")
    assert watch.returncode == 1
    assert rest.strip().splitlines()[-1].startswith(f"{job_id} CANCELLED")


def test_watch_json_prints_one_job_per_line_until_terminal(cli: Cli) -> None:
    job_id = submitted_id(cli, "--model", "cli-echo", "--data", "x")

    result = cli.run("watch", job_id, "--json")

    snapshots = [json.loads(line) for line in result.stdout.splitlines()]
    assert snapshots[-1]["status"] == "JOB_STATUS_COMPLETED"
    assert all(snapshot["id"] == job_id for snapshot in snapshots)


def test_cancelling_a_finished_job_is_not_an_error(cli: Cli) -> None:
    job_id = submitted_id(cli, "--model", "cli-echo", "--data", "x")
    cli.run("watch", job_id)

    result = cli.run("cancel", job_id)

    assert result.returncode == 0
    assert "had already ended" in result.stdout


def test_a_repeated_idempotency_key_returns_the_existing_job(cli: Cli) -> None:
    args = ("--model", "cli-echo", "--data", "x", "--idempotency-key", "cli-key-1")
    first = cli.run("submit", *args)
    second = cli.run("submit", *args)

    assert first.stdout.split()[1] == second.stdout.split()[1]
    assert "existing job" in second.stdout


def test_group_from_jsonl_runs_every_child(cli: Cli, tmp_path: Path) -> None:
    group = tmp_path / "group.jsonl"
    group.write_text(
        "\n".join(json.dumps({"model": "cli-echo", "data": f"page {i}"}) for i in range(3))
    )

    result = cli.run("submit", "--group", str(group), "--max-parallel", "1", "--wait")

    assert result.returncode == 0, result.stdout + result.stderr
    parent = result.stdout.split()[1]
    shown = cli.run("get", parent).stdout
    assert shown.count("COMPLETED") == 4  # the parent and its three children


def test_batch_from_jsonl_submits_every_line_in_order(cli: Cli, tmp_path: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    lines = [json.dumps({"model": "cli-echo", "data": f"item {i}"}) for i in range(3)]
    batch.write_text("\n".join(lines) + "\n")

    result = cli.run("submit", "--batch", str(batch), "--json")

    assert result.returncode == 0, result.stderr
    responses = json.loads(result.stdout)["responses"]
    assert len(responses) == 3
    for response in responses:
        assert cli.run("watch", response["job"]["id"]).returncode == 0
    results = [cli.run("get", response["job"]["id"]).stdout for response in responses]
    assert [text.rstrip().endswith(f"item {i}") for i, text in enumerate(results)] == [True] * 3


def test_a_batch_line_the_server_refuses_is_reported_by_line_number(
    cli: Cli, tmp_path: Path
) -> None:
    batch = tmp_path / "batch.jsonl"
    good = json.dumps({"model": "cli-echo", "data": "x"})
    batch.write_text(f"{good}\n\n{json.dumps({'model': 'Not-A-Model'})}\n")

    result = cli.run("submit", "--batch", str(batch))

    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.startswith(f"jobgate: error: {batch}: line 3: ")
    assert "requests[1].job.model" in result.stderr


def test_a_batch_line_that_is_not_json_is_a_usage_error_naming_it(cli: Cli, tmp_path: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"model": "cli-echo"}\n{oops\n')

    result = cli.run("submit", "--batch", str(batch))

    assert result.returncode == 2
    assert f"{batch}: line 2 is not JSON" in result.stderr


def test_an_unknown_job_is_one_line_on_stderr_and_exit_3(cli: Cli) -> None:
    result = cli.run("get", "01ARZ3NDEKTSV4RRFFQ69G5FAV")

    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.startswith("jobgate: error: JOB_NOT_FOUND")
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unreachable_server_is_one_line_and_exit_3(cli: Cli) -> None:
    # A refused connection fails the call at once (no wait_for_ready); the deadline is
    # only a bound, so a loaded host must not reach it first (a CI run met
    # DEADLINE_EXCEEDED at 1 s).
    result = cli.run(
        "get", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--target", "127.0.0.1:1", "--timeout", "30"
    )

    assert result.returncode == 3
    assert result.stderr.startswith("jobgate: error: UNAVAILABLE")
    assert "Traceback" not in result.stderr


def test_bad_input_is_a_usage_error_with_exit_2(cli: Cli, tmp_path: Path) -> None:
    bad_label = cli.run("submit", "--model", "cli-echo", "--data", "x", "--label", "novalue")
    missing = cli.run("submit", "--model", "cli-echo", "--file", str(tmp_path / "missing"))
    no_payload = cli.run("submit", "--model", "cli-echo")

    for result in (bad_label, missing, no_payload):
        assert result.returncode == 2
        assert result.stderr.startswith("jobgate: error:")
        assert "Traceback" not in result.stderr


def test_watch_follows_a_running_job_from_its_progress_to_the_end(cli: Cli, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    job_id = submitted_id(cli, "--model", "cli-gate", "--data", "x", "--label", f"gate={gate}")
    wait_until(lambda: "waiting-for-gate" in cli.run("get", job_id).stdout, timeout=15)
    watch = cli.popen("watch", job_id)
    assert watch.stdout is not None

    first_line = watch.stdout.readline()
    gate.touch()
    rest, _ = watch.communicate(timeout=20)

    assert first_line.strip().endswith("50% PROCESSING waiting-for-gate")
    assert watch.returncode == 0
    assert rest.strip().splitlines()[-1].startswith(f"{job_id} COMPLETED")
