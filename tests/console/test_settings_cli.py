"""`jobgate console`: flags, the exposure refusals, and a start without the extra."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from jobgate.cli import build_parser
from jobgate.console.passwords import hash_password
from jobgate.console.settings import AuthMode, SettingsError, from_args

ROOT = Path(__file__).resolve().parents[2]


def parse(*flags: str) -> argparse.Namespace:
    return build_parser(["console", *flags]).parse_args(["console", *flags])


@pytest.fixture
def users_file(tmp_path: Path) -> str:
    path = tmp_path / "users"
    path.write_text(f"ada:{hash_password('pw')}\n")
    return str(path)


def test_the_console_listens_on_loopback_by_default() -> None:
    settings = from_args(parse(), env={})
    assert str(settings.listen) == "127.0.0.1:8080"
    assert settings.auth is AuthMode.NONE
    assert settings.gateway.target == "127.0.0.1:50051"


def test_a_non_loopback_listen_without_a_login_is_refused() -> None:
    with pytest.raises(SettingsError, match="needs a login"):
        from_args(parse("--listen", "0.0.0.0:8080", "--behind-tls-proxy"), env={})


def test_a_non_loopback_listen_without_tls_is_refused(users_file: str) -> None:
    with pytest.raises(SettingsError, match="needs TLS"):
        from_args(
            parse("--listen", "0.0.0.0:8080", "--console-auth", f"password:{users_file}"), env={}
        )


def test_a_host_name_counts_as_not_loopback() -> None:
    with pytest.raises(SettingsError, match="needs a login"):
        from_args(parse("--listen", "console.internal:8080"), env={})


def test_a_non_loopback_listen_with_a_login_behind_a_tls_proxy_starts(users_file: str) -> None:
    flags = ("--listen", "[::]:8443", "--console-auth", "token", "--behind-tls-proxy")
    settings = from_args(parse(*flags), env={})
    assert settings.listen.host == "::" and settings.secure_cookies


def test_a_non_loopback_listen_with_a_login_and_tls_starts(users_file: str) -> None:
    flags = ("--listen", "0.0.0.0:8443", "--console-auth", f"password:{users_file}",
             "--tls-cert", "cert.pem", "--tls-key", "key.pem")  # fmt: skip
    settings = from_args(parse(*flags), env={})
    assert settings.listen.host == "0.0.0.0" and settings.secure_cookies


def test_tls_cert_and_key_go_together() -> None:
    with pytest.raises(SettingsError, match="go together"):
        from_args(parse("--tls-cert", "cert.pem"), env={})


@pytest.mark.parametrize("mode", ["password", "ldap", "token:x"])
def test_an_unknown_console_auth_is_refused(mode: str) -> None:
    with pytest.raises(SettingsError, match="--console-auth must be"):
        from_args(parse("--console-auth", mode), env={})


def test_the_token_file_is_the_consoles_own_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    settings = from_args(parse("--token-file", str(tmp_path / "token")), env={})
    assert settings.gateway.token == "s3cret"


def test_the_settings_fall_back_to_the_environment(users_file: str) -> None:
    env = {
        "JOBGATE_TARGET": "gw:1",
        "JOBGATE_CONSOLE_LISTEN": "127.0.0.2:9000",
        "JOBGATE_CONSOLE_AUTH": f"password:{users_file}",
        "JOBGATE_TOKEN": "t",
    }
    settings = from_args(parse(), env=env)
    assert settings.gateway.target == "gw:1" and settings.gateway.token == "t"
    assert str(settings.listen) == "127.0.0.2:9000" and settings.auth is AuthMode.PASSWORD


def run_cli(*args: str, stdin: str = "", prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"import sys\n{prelude}\nfrom jobgate.cli import main\nsys.exit(main({list(args)!r}))"
    return subprocess.run(
        [sys.executable, "-c", code],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


@pytest.mark.parametrize("missing", ["starlette", "uvicorn", "jinja2"])
def test_without_the_extra_the_console_names_the_install_command(missing: str) -> None:
    done = run_cli("console", prelude=f"sys.modules[{missing!r}] = None")
    assert done.returncode == 1
    assert "pip install 'jobgate[console]'" in done.stderr


def test_a_refused_start_is_one_line_and_exit_2() -> None:
    done = run_cli("console", "--listen", "0.0.0.0:8080")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "needs a login" in done.stderr


def test_hash_password_prints_a_users_file_line() -> None:
    done = run_cli("console", "--hash-password", "ada", stdin="pw\n")
    assert done.returncode == 0
    name, _, encoded = done.stdout.strip().partition(":")
    assert name == "ada" and encoded.startswith("scrypt$15$8$1$")
