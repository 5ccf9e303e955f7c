"""The shared test harness itself: the launcher's port 0 start-up, and the session PKI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launcher import SERVING, JobgateServer, health_status, parse_announcement
from tests.pki import make_pki

ANNOUNCED = (
    "jobgate serve listening job=127.0.0.1:41001 worker=127.0.0.1:41002 metrics=127.0.0.1:41003"
)


def test_the_announcement_gives_every_listener_address() -> None:
    announcement = parse_announcement(f"some output\n{ANNOUNCED}\nmore output\n")

    assert announcement is not None
    assert announcement.command == "serve"
    assert announcement.addresses == {
        "job": "127.0.0.1:41001",
        "worker": "127.0.0.1:41002",
        "metrics": "127.0.0.1:41003",
    }
    assert announcement.grpc_targets == ["127.0.0.1:41001", "127.0.0.1:41002"]


def test_a_log_line_about_listening_is_not_the_announcement() -> None:
    log = '{"msg": "listening", "job": "127.0.0.1:1"}\n2026 info jobgate.server: listening job=x\n'

    assert parse_announcement(log) is None


def test_metrics_off_is_no_address() -> None:
    announcement = parse_announcement("jobgate gateway listening job=127.0.0.1:5 metrics=off\n")

    assert announcement is not None
    assert announcement.addresses == {"job": "127.0.0.1:5"}


def test_a_server_on_port_0_is_reached_at_the_ports_it_announced(tmp_path: Path) -> None:
    server = JobgateServer("serve", tmp_path / "serve.log")
    server.start()
    try:
        server.wait_serving()
        addresses = server.wait_announced().addresses
        assert all(not address.endswith(":0") for address in addresses.values()), addresses
        assert health_status(addresses["job"]) == SERVING
        assert health_status(addresses["worker"]) == SERVING
    finally:
        assert server.terminate() == 0, server.log_tail()


def test_a_restarted_server_keeps_its_addresses(tmp_path: Path) -> None:
    server = JobgateServer("serve", tmp_path / "serve.log", {"grace-period": "1"})
    server.start()
    try:
        server.wait_serving()
        before = server.wait_announced().addresses
        assert server.terminate() == 0, server.log_tail()
        server.restart()
        assert server.wait_announced().addresses == before
    finally:
        server.terminate()


def test_certificates_fail_without_openssl_when_tools_are_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("JOBGATE_REQUIRE_TOOLS", "1")

    with pytest.raises(pytest.fail.Exception, match="openssl"):
        make_pki(tmp_path / "pki")


def test_certificates_skip_without_openssl_locally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("JOBGATE_REQUIRE_TOOLS", raising=False)

    with pytest.raises(pytest.skip.Exception, match="openssl"):
        make_pki(tmp_path / "pki")
