"""Console settings: flags, their JOBGATE_* fallbacks, and the exposure rules.

Standard library only, so `jobgate console --help` and a refused start need
no web stack. The rules, checked once here before anything listens:

- the console listens on 127.0.0.1 unless told otherwise;
- a `--listen` that is not loopback needs a login (`--console-auth`) and
  TLS: `--tls-cert/--tls-key`, or `--behind-tls-proxy` saying a proxy
  terminates TLS in front (then cookies are still marked Secure);
- `--console-auth token` signs people in with their own JobService token and
  calls with it, never with the console's own; `--console-auth
  password:FILE` checks a users file (see `passwords`) and calls with the
  console's token (`--token-file`).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

from jobgate._address import Address
from jobgate.client._channel import DEFAULT_TARGET, ConnectionConfig
from jobgate.console.passwords import Users, UsersFileError

DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_SESSION_TTL = timedelta(hours=8)
INSTALL_HINT = "pip install 'jobgate[console]'"


class SettingsError(ValueError):
    """A flag or JOBGATE_* value that cannot be used; the message names it."""


class AuthMode(StrEnum):
    NONE = "none"
    TOKEN = "token"
    PASSWORD = "password"


@dataclass(frozen=True)
class Listen(Address):
    """Where the console listens; off loopback it needs a login and TLS (`validate`)."""

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name: it may resolve to anything


@dataclass(frozen=True)
class ConsoleSettings:
    """Everything `jobgate console` (or `serve --console-listen`) needs to run one."""

    #: How to reach JobService; its token is the console's own (None: no token).
    gateway: ConnectionConfig = field(default_factory=ConnectionConfig)
    listen: Listen = Listen("127.0.0.1", 8080)
    read_only: bool = False
    auth: AuthMode = AuthMode.NONE
    users: Users | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    behind_tls_proxy: bool = False
    session_ttl: timedelta = DEFAULT_SESSION_TTL

    def __post_init__(self) -> None:
        check_exposure(self)

    @property
    def secure_cookies(self) -> bool:
        """Cookies go over HTTPS only: TLS here, or a proxy terminating it."""
        return self.tls_cert is not None or self.behind_tls_proxy

    @property
    def login_required(self) -> bool:
        return self.auth is not AuthMode.NONE


def check_exposure(settings: ConsoleSettings) -> None:
    """Refuse a console others can reach without a login or without TLS."""
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise SettingsError("--tls-cert and --tls-key go together")
    if settings.auth is AuthMode.PASSWORD and settings.users is None:
        raise SettingsError("--console-auth password:FILE needs a users file")
    if settings.listen.loopback:
        return
    if not settings.login_required:
        raise SettingsError(
            f"--listen {settings.listen} is not loopback: it needs a login "
            "(--console-auth token or --console-auth password:FILE)"
        )
    if not settings.secure_cookies:
        raise SettingsError(
            f"--listen {settings.listen} is not loopback: it needs TLS "
            "(--tls-cert and --tls-key, or --behind-tls-proxy)"
        )


def parse_listen(text: str, flag: str = "--listen") -> Listen:
    host, colon, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError(f"{flag} must be HOST:PORT, got {text[:128]!r}")
    return Listen(host, int(port))


def parse_auth(text: str) -> tuple[AuthMode, Users | None]:
    """`none`, `token` or `password:FILE`."""
    mode, _, path = text.partition(":")
    if mode in (AuthMode.NONE, AuthMode.TOKEN) and not path:
        return AuthMode(mode), None
    if mode == AuthMode.PASSWORD and path:
        try:
            return AuthMode.PASSWORD, Users.load(path)
        except UsersFileError as error:
            raise SettingsError(f"--console-auth: {error}") from None
    raise SettingsError(f"--console-auth must be none, token or password:FILE, got {text[:128]!r}")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", help=f"JobService HOST:PORT (env JOBGATE_TARGET, default {DEFAULT_TARGET})"
    )
    parser.add_argument(
        "--listen",
        help=f"HOST:PORT to serve on (env JOBGATE_CONSOLE_LISTEN, default "
        f"{DEFAULT_LISTEN}); not loopback needs --console-auth and TLS",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="the console's own bearer token (env JOBGATE_TOKEN_FILE; else JOBGATE_TOKEN); "
        "unused with --console-auth token, where each person's own token is used",
    )
    parser.add_argument("--tenant", help="tenant for a gateway in open mode (env JOBGATE_TENANT)")
    parser.add_argument(
        "--read-only", action="store_true", help="refuse and hide every action (cancel, retry)"
    )
    parser.add_argument(
        "--console-auth",
        metavar="MODE",
        help="login: none (default, loopback only), token (sign in with a JobService token) "
        "or password:FILE (users file of NAME:HASH lines; see --hash-password) "
        "(env JOBGATE_CONSOLE_AUTH)",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="PEM certificate to serve HTTPS")
    parser.add_argument("--tls-key", metavar="FILE", help="PEM key of --tls-cert")
    parser.add_argument(
        "--behind-tls-proxy",
        action="store_true",
        help="a proxy in front terminates TLS: allow a non-loopback --listen without "
        "--tls-cert and mark cookies Secure",
    )
    parser.add_argument(
        "--session-ttl",
        metavar="SECONDS",
        help=f"how long a sign-in lasts (default {int(DEFAULT_SESSION_TTL.total_seconds())})",
    )
    parser.add_argument("--target-tls-ca", metavar="FILE", help="PEM CA of the gateway's TLS")
    parser.add_argument("--target-tls-cert", metavar="FILE", help="PEM client cert (mTLS)")
    parser.add_argument("--target-tls-key", metavar="FILE", help="PEM client key (mTLS)")
    parser.add_argument(
        "--hash-password",
        metavar="NAME",
        help="print a users-file line for NAME (password read from the terminal) and exit",
    )


def from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> ConsoleSettings:
    """The settings for parsed flags, each falling back to its JOBGATE_* variable."""
    env = os.environ if env is None else env
    auth, users = parse_auth(args.console_auth or env.get("JOBGATE_CONSOLE_AUTH") or "none")
    gateway = ConnectionConfig(
        target=args.target or env.get("JOBGATE_TARGET") or DEFAULT_TARGET,
        token=_own_token(args.token_file or env.get("JOBGATE_TOKEN_FILE"), env),
        tenant=args.tenant or env.get("JOBGATE_TENANT") or None,
    )
    try:
        gateway = gateway.with_tls_files(
            args.target_tls_ca, args.target_tls_cert, args.target_tls_key
        )
    except (OSError, ValueError) as error:
        raise SettingsError(f"--target-tls-*: {error}") from None
    return ConsoleSettings(
        gateway=gateway,
        listen=parse_listen(args.listen or env.get("JOBGATE_CONSOLE_LISTEN") or DEFAULT_LISTEN),
        read_only=args.read_only,
        auth=auth,
        users=users,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        behind_tls_proxy=args.behind_tls_proxy,
        session_ttl=_seconds(args.session_ttl, "--session-ttl", DEFAULT_SESSION_TTL),
    )


def _own_token(path: str | None, env: Mapping[str, str]) -> str | None:
    if path is None:
        return env.get("JOBGATE_TOKEN") or None
    try:
        token = Path(path).read_text().strip()
    except OSError as error:
        raise SettingsError(f"--token-file: cannot read {path}: {error.strerror}") from None
    if not token:
        raise SettingsError(f"--token-file: {path} is empty")
    return token


def _seconds(text: str | None, flag: str, default: timedelta) -> timedelta:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{flag} must be a number of seconds, got {text[:128]!r}") from None
    if not value > 0:
        raise SettingsError(f"{flag} must be above 0")
    return timedelta(seconds=value)
