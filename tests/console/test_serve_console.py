"""`jobgate serve --console-listen`: the console in the serve process, a client of its gateway."""

from __future__ import annotations

import hashlib
import json
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.launcher import REPO_ROOT, JobgateServer, flag_list, run_to_exit, server_environment
from tests.pki import Pki

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


def _auth_file(path: Path) -> Path:
    digest = hashlib.sha256(b"admin-token").hexdigest()
    path.write_text(json.dumps({"tokens": [{"sha256": digest, "tenant": "ops", "role": "admin"}]}))
    return path


def test_serve_announces_its_console_and_the_console_shows_its_queues(
    serve: JobgateServer,
) -> None:
    console = serve.address("console")
    status, page = _get(f"http://{console}/queues")
    assert status == 200
    assert "<html" in page.lower()


def test_serve_with_an_auth_file_asks_for_a_sign_in(tmp_path: Path) -> None:
    auth = _auth_file(tmp_path / "auth.json")
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


def test_serve_refuses_a_console_beyond_loopback_without_a_login(tmp_path: Path) -> None:
    # No --auth-file: the console would have no login, so it must stay on loopback.
    code, output = run_to_exit("serve", {**SETTINGS, "console-listen": "0.0.0.0:0"})
    assert code != 0
    assert "--console-listen" in output and "login" in output


def test_serve_with_tls_and_an_auth_file_serves_its_console_beyond_loopback_over_https(
    tmp_path: Path, pki: Pki
) -> None:
    settings = {
        **SETTINGS,
        "console-listen": "0.0.0.0:0",
        "auth-file": str(_auth_file(tmp_path / "auth.json")),
        "tls-cert": str(pki.server_cert),
        "tls-key": str(pki.server_key),
    }
    server = JobgateServer("serve", tmp_path / "serve.log", settings)
    server.start()
    try:
        server.wait_announced(timeout=30.0)
        port = server.address("console").rsplit(":", 1)[1]
        verify = ssl.create_default_context(cafile=str(pki.ca))
        with httpx2.Client(base_url=f"https://127.0.0.1:{port}", verify=verify) as browser:
            form = browser.get("/login")
            assert form.status_code == 200
            cookie = form.headers["set-cookie"]
            assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
            found = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert found is not None
            # The sign-in checks the token with serve's own JobService, over its TLS.
            signed = browser.post("/login", data={"csrf": found[1], "token": "admin-token"})
            assert signed.status_code == 303 and signed.headers["location"] == "/jobs"
            assert browser.get("/jobs").status_code == 200
    finally:
        server.terminate(timeout=15)


def test_serve_without_the_console_extra_exits_naming_the_install_command() -> None:
    flags = flag_list({**SETTINGS, "console-listen": "127.0.0.1:0"})
    code = (
        "import sys\n"
        "sys.modules['starlette'] = None\n"
        "from jobgate.cli import main\n"
        f"sys.exit(main(['serve', *{flags!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=server_environment(),
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "pip install 'jobgate[console]'" in done.stdout + done.stderr


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None
