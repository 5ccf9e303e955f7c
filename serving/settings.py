"""Server settings: every DESIGN flag plus our extras, each also from JOBGATE_<NAME>.

Flags are read as strings by argparse and converted here, so a bad value is
one line naming the flag (argparse would print usage plus a second line).
The result is one frozen `ServerSettings`, built once in main and passed down.
Each default is written once (the store's in `StoreSettings`, the rest in
`ServerSettings`) and every flag's help text quotes it from there.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from jobgate._address import Address as Address  # re-exported: the servers' type
from jobgate._logs import LOG_FORMATS, LOG_LEVELS
from jobgate.v1.limits import MAX_ATTEMPTS
from store.keys import MAX_PARTITIONS, PARTITION_PATTERN
from store.model import StoreSettings

T = TypeVar("T")
_STORE = StoreSettings()
FAIR_SHARE_MODES = ("tenant", "off")
DATA_SYNC_MODES = ("full", "normal")


class SettingsError(ValueError):
    """A flag or JOBGATE_* value that cannot be used; the message names it."""


@dataclass(frozen=True)
class ServerSettings:
    redis_url: str | None = None
    listen: Address = Address("127.0.0.1", 50051)
    worker_listen: Address = Address("127.0.0.1", 50052)
    metrics_listen: Address | None = Address("127.0.0.1", 9464)
    auth_file: str | None = None
    lease_timeout: timedelta = _STORE.lease_timeout
    max_attempts: int = _STORE.max_attempts
    run_timeout: timedelta = _STORE.run_timeout
    result_ttl: timedelta = _STORE.result_ttl
    queue_timeout: timedelta = _STORE.queue_timeout
    max_payload_bytes: int = 4 * 1024 * 1024
    max_group_children: int = _STORE.max_group_children
    max_live_per_tenant: int = _STORE.max_live_per_tenant
    max_live_total: int = _STORE.max_live_total
    max_batch_submit: int = 1000
    redis_partition: str = "default"
    redis_partitions: int = 1
    retry_backoff: timedelta = _STORE.retry_backoff_base
    retry_backoff_max: timedelta = _STORE.retry_backoff_max
    grace_period: timedelta = timedelta(seconds=10)
    log_format: str = "text"
    log_level: str = "info"
    #: One `job transition` line per status change (the recovery leader reads
    #: the audit stream a second time for it); off by default: `jobgate
    #: events` has the same trail.
    log_transitions: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    #: "tenant" (claims interleave tenants by weight) or "off" (one FIFO order).
    fair_share: str = "tenant" if _STORE.fair_share else "off"
    #: serve: the embedded store's directory (SQLite); None keeps it in memory.
    data_dir: str | None = None
    #: "full" syncs every commit to disk, "normal" leaves it to the OS.
    data_sync: str = "full"
    #: serve: where the web console listens; None starts none.
    console_listen: Address | None = None

    def store_settings(self) -> StoreSettings:
        return StoreSettings(
            lease_timeout=self.lease_timeout,
            max_attempts=self.max_attempts,
            run_timeout=self.run_timeout,
            queue_timeout=self.queue_timeout,
            result_ttl=self.result_ttl,
            max_group_children=self.max_group_children,
            max_live_per_tenant=self.max_live_per_tenant,
            max_live_total=self.max_live_total,
            retry_backoff_base=self.retry_backoff,
            retry_backoff_max=self.retry_backoff_max,
            fair_share=self.fair_share == "tenant",
        )


def parse_address(text: str) -> Address:
    """HOST:PORT or [V6HOST]:PORT; port 0 asks for an ephemeral port."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"expected a port 0..65535, got {port_text!r}")
    return Address(host, int(port_text))


def parse_optional_address(text: str) -> Address | None:
    """Like parse_address; an empty value or "off" turns the listener off."""
    return None if text.strip().lower() in ("", "off") else parse_address(text)


def parse_seconds(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected positive seconds, got {text!r}")
    return timedelta(seconds=value)


def _int_parser(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise ValueError(f"expected {low}..{high}, got {value}")
        return value

    return parse


#: --redis-partitions' rule, shared with `jobgate events`.
parse_partitions = _int_parser(1, MAX_PARTITIONS)


def _switch(text: str) -> bool:
    """on/off (also true/false, yes/no, 1/0)."""
    value = text.strip().lower()
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


def _choice_parser(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text.lower()

    return parse


def _non_empty(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


def _partition(text: str) -> str:
    # The store's own rule (store/keys.py), checked here so a bad name is
    # reported against this flag and not, later, against --redis-url.
    if not PARTITION_PATTERN.fullmatch(text):
        raise ValueError(f"expected a name matching {PARTITION_PATTERN.pattern}, got {text!r}")
    return text


@dataclass(frozen=True)
class _Flag:
    name: str  # the ServerSettings field
    parse: Callable[[str], Any]
    help: str
    metavar: str = "VALUE"

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "JOBGATE_" + self.name.upper()


_MAX_INT = 2**31 - 1
FLAGS: tuple[_Flag, ...] = (
    _Flag("redis_url", _non_empty, "Redis URL (serve: embedded store when unset)", "URL"),
    _Flag(
        "listen",
        parse_address,
        "JobService address (serve, gateway); worker-server: its WorkerService address",
        "HOST:PORT",
    ),
    _Flag("worker_listen", parse_address, "WorkerService address (serve)", "HOST:PORT"),
    _Flag(
        "metrics_listen",
        parse_optional_address,
        "Prometheus /metrics address; off disables",
        "HOST:PORT",
    ),
    _Flag("auth_file", _non_empty, "JSON token file; without it the server runs open", "PATH"),
    _Flag("lease_timeout", parse_seconds, "lease length in seconds", "SECONDS"),
    _Flag("max_attempts", _int_parser(1, MAX_ATTEMPTS), "default attempts per job", "N"),
    _Flag("run_timeout", parse_seconds, "default run timeout in seconds", "SECONDS"),
    _Flag("result_ttl", parse_seconds, "seconds a terminal job is kept", "SECONDS"),
    _Flag("queue_timeout", parse_seconds, "default queue timeout in seconds", "SECONDS"),
    _Flag("max_payload_bytes", _int_parser(1, 1 << 30), "payload/result limit in bytes", "N"),
    _Flag("max_group_children", _int_parser(1, 1_000_000), "children per group", "N"),
    _Flag("max_live_per_tenant", _int_parser(1, _MAX_INT), "live jobs per tenant", "N"),
    _Flag("max_live_total", _int_parser(1, _MAX_INT), "live jobs in total", "N"),
    _Flag("max_batch_submit", _int_parser(1, 100_000), "items per BatchSubmit call", "N"),
    _Flag("redis_partition", _partition, "Redis hash tag jobgate:{NAME}:", "NAME"),
    _Flag(
        "redis_partitions",
        parse_partitions,
        "hash tags the state spreads over (Redis Cluster); fixed for a deployment's life",
        "N",
    ),
    _Flag(
        "retry_backoff",
        parse_seconds,
        "first retry back-off in seconds; doubles per attempt",
        "SECONDS",
    ),
    _Flag("retry_backoff_max", parse_seconds, "longest retry back-off in seconds", "SECONDS"),
    _Flag("grace_period", parse_seconds, "drain time on SIGTERM in seconds", "SECONDS"),
    _Flag("log_format", _choice_parser(LOG_FORMATS), "one of " + ", ".join(LOG_FORMATS), "FORMAT"),
    _Flag("log_level", _choice_parser(LOG_LEVELS), "one of " + ", ".join(LOG_LEVELS), "LEVEL"),
    _Flag(
        "log_transitions",
        _switch,
        "a 'job transition' log line per status change (jobgate events has them all)",
        "on|off",
    ),
    _Flag("tls_cert", _non_empty, "server certificate (PEM) for TLS", "PATH"),
    _Flag("tls_key", _non_empty, "server private key (PEM) for TLS", "PATH"),
    _Flag(
        "tls_client_ca", _non_empty, "CA (PEM) for mutual TLS: clients must present a cert", "PATH"
    ),
    _Flag(
        "fair_share",
        _choice_parser(FAIR_SHARE_MODES),
        "tenant: claims interleave tenants by weight; off: one FIFO order; fixed for a"
        " deployment's life",
        "|".join(FAIR_SHARE_MODES),
    ),
    _Flag("data_dir", _non_empty, "serve: keep the embedded store in DIR (unset: memory)", "DIR"),
    _Flag(
        "data_sync",
        _choice_parser(DATA_SYNC_MODES),
        "serve --data-dir: full syncs each commit to disk; normal survives a crash, not a"
        " power loss",
        "|".join(DATA_SYNC_MODES),
    ),
    _Flag(
        "console_listen",
        parse_optional_address,
        "serve: also serve the web console here (unset or off: none)",
        "HOST:PORT",
    ),
)


def default_text(value: object) -> str | None:
    """A value as its flag would spell it; None when there is nothing to show."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}"
    return repr(value) if isinstance(value, str) else str(value)


def _bytes_text(value: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value % size == 0:
            return f"{value // size} {unit}"
    return str(value)


def help_text(flag: _Flag) -> str:
    """The flag's help, its default (from ServerSettings) and its env twin."""
    value = getattr(ServerSettings(), flag.name)
    is_bytes = flag.name.endswith("_bytes") and isinstance(value, int)
    default = _bytes_text(value) if is_bytes else default_text(value)
    shown = f" (default {default})" if default is not None else ""
    return f"{flag.help}{shown} [env {flag.env}]"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every server flag, on every server command (unused ones are ignored)."""
    for flag in FLAGS:
        parser.add_argument(
            flag.option, dest=flag.name, metavar=flag.metavar, default=None, help=help_text(flag)
        )


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ServerSettings:
    """The settings from flags, else JOBGATE_<NAME>, else the defaults.

    Raises SettingsError naming the flag (and its env var) on a bad value.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for flag in FLAGS:
        raw: str | None = getattr(args, flag.name, None)
        source = flag.option
        if raw is None and flag.env in environ:
            raw, source = environ[flag.env], flag.env
        if raw is None:
            continue
        try:
            values[flag.name] = flag.parse(raw)
        except ValueError as error:
            raise SettingsError(f"{source}: {error}") from None
    settings = ServerSettings(**values)
    _check_consistent(settings)
    return settings


def _check_consistent(settings: ServerSettings) -> None:
    if settings.retry_backoff > settings.retry_backoff_max:
        raise SettingsError(
            f"--retry-backoff ({default_text(settings.retry_backoff)} s) must not exceed"
            f" --retry-backoff-max ({default_text(settings.retry_backoff_max)} s)"
        )
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise SettingsError("--tls-cert and --tls-key must be given together")
    if settings.tls_client_ca is not None and settings.tls_cert is None:
        raise SettingsError("--tls-client-ca needs --tls-cert and --tls-key")
