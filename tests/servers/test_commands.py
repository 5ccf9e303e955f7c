"""The server commands as a user runs them: exit codes, one-line errors, the ready line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from tests.redis_server import RedisServer, free_port

EPHEMERAL = ["--listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0"]
EPHEMERAL += ["--metrics-listen", "127.0.0.1:0"]


def jobgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobgate.cli", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**_clean_env(), **(env or {})},
    )


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert text in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_flag_value_is_one_line_and_exit_2() -> None:
    result = jobgate("serve", "--lease-timeout", "soon")
    assert_one_line_error(result, 2, "--lease-timeout")


def test_bad_env_value_is_one_line_and_exit_2() -> None:
    result = jobgate("worker-server", env={"JOBGATE_MAX_PAYLOAD_BYTES": "lots"})
    assert_one_line_error(result, 2, "JOBGATE_MAX_PAYLOAD_BYTES")


def test_gateway_requires_a_redis_url() -> None:
    assert_one_line_error(jobgate("gateway"), 2, "--redis-url")


def test_unreachable_redis_is_one_line_and_exit_1() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = jobgate("gateway", "--redis-url", url, *EPHEMERAL)
    assert_one_line_error(result, 1, "cannot open")


def test_missing_auth_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = jobgate("serve", *EPHEMERAL, "--auth-file", str(tmp_path / "none.json"))
    assert_one_line_error(result, 1, "auth file")


def test_an_auth_file_with_a_bad_placement_key_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    entry = {"sha256": "0" * 64, "tenant": "bank", "role": "client", "pools": []}
    path.write_text(json.dumps({"tokens": [entry]}))
    result = jobgate("serve", *EPHEMERAL, "--auth-file", str(path))
    assert_one_line_error(result, 1, f"auth file {path}: tokens[0].pools must not be empty")


def test_taken_port_is_one_line_and_exit_1() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = jobgate("serve", *EPHEMERAL, "--listen", f"127.0.0.1:{port}")
    assert_one_line_error(result, 1, f"127.0.0.1:{port}")


def test_serve_announces_ports_serves_metrics_and_drains_on_sigterm() -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobgate.cli",
            "serve",
            *EPHEMERAL,
            "--log-format",
            "json",
            "--log-level",
            "debug",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_clean_env(),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        words = dict(part.split("=", 1) for part in line.split()[3:])
        assert line.startswith("jobgate serve listening job=127.0.0.1:")
        assert set(words) == {"job", "worker", "metrics"}
        assert all(not address.endswith(":0") for address in words.values())
        metrics = urllib.request.urlopen(f"http://{words['metrics']}/metrics", timeout=5).read()
        assert b"jobgate_store_up 1.0" in metrics
        job_id = _submit(words["job"], tenant="acme")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    finally:
        process.kill()
    assert process.returncode == 0
    entries = [json.loads(line) for line in stderr.strip().splitlines()]
    messages = [entry["message"] for entry in entries]
    assert "listening" in messages and "stopped" in messages
    assert any("running open" in message for message in messages)
    [submitted] = [entry for entry in entries if entry["message"] == "job submitted"]
    assert (submitted["job_id"], submitted["tenant"]) == (job_id, "acme")


def _submit(target: str, tenant: str) -> str:
    with grpc.insecure_channel(target) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m"))
        response = stub.Submit(request, metadata=(("x-jobgate-tenant", tenant),), timeout=5)
        return response.job.id


@pytest.mark.parametrize("command", ["serve", "gateway", "worker-server"])
def test_every_command_accepts_every_setting(command: str) -> None:
    result = jobgate(command, "--help")
    assert result.returncode == 0
    for flag in ("--redis-url", "--worker-listen", "--max-live-total", "--redis-partition"):
        assert flag in result.stdout
    for flag in ("--retry-backoff", "--grace-period", "--tls-client-ca", "--log-format"):
        assert flag in result.stdout


@pytest.mark.redis
def test_evicting_redis_is_refused_in_one_line(own_redis: RedisServer) -> None:
    own_redis.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    result = jobgate("worker-server", "--redis-url", own_redis.url, *EPHEMERAL)
    assert_one_line_error(result, 1, "maxmemory-policy")
