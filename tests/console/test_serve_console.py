"""`jobgate serve --console-listen`: the console in the serve process, a client of its gateway."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launcher import JobgateServer, run_to_exit

SETTINGS = {"listen": "127.0.0.1:0", "worker-listen": "127.0.0.1:0", "metrics-listen": "off"}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[JobgateServer]:
    server = JobgateServer(
        "serve", tmp_path / "serve.log", {**SETTINGS, "console-listen": "127.0.0.1:0"}
    )
    server.start()
    try:
        server.wait_serving(timeout=30.0)
        yield server
    finally:
        server.terminate(timeout=15)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_serve_announces_its_console_and_the_console_shows_its_queues(
    serve: JobgateServer,
) -> None:
    console = serve.address("console")
    status, page = _get(f"http://{console}/queues")
    assert status == 200
    assert "<html" in page.lower()


def test_serve_with_an_auth_file_asks_for_a_sign_in(tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    digest = hashlib.sha256(b"admin-token").hexdigest()
    auth.write_text(json.dumps({"tokens": [{"sha256": digest, "tenant": "ops", "role": "admin"}]}))
    settings = {**SETTINGS, "console-listen": "127.0.0.1:0", "auth-file": str(auth)}
    server = JobgateServer("serve", tmp_path / "serve.log", settings)
    server.start()
    try:
        server.wait_serving(timeout=30.0)
        request = urllib.request.Request(f"http://{server.address('console')}/jobs")
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            opener.open(request, timeout=10)
            answered = 200
        except urllib.error.HTTPError as error:
            answered, location = error.code, error.headers.get("location", "")
        assert answered in (302, 303, 307)
        assert "login" in location or "sign" in location
    finally:
        server.terminate(timeout=15)


def test_serve_refuses_a_console_beyond_loopback_without_tls(tmp_path: Path) -> None:
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"tokens": []}))
    settings = {**SETTINGS, "console-listen": "0.0.0.0:0", "auth-file": str(auth)}
    code, output = run_to_exit("serve", settings)
    assert code != 0
    assert "console" in output and "TLS" in output


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None
