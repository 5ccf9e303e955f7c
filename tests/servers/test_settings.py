"""Server settings: DESIGN's defaults, flags over JOBGATE_<NAME>, one-line errors."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from serving.settings import (
    FLAGS,
    Address,
    ServerSettings,
    SettingsError,
    _Flag,
    add_flags,
    default_text,
    from_args,
    help_text,
)
from store.keys import Keys
from store.model import StoreSettings


def parse(argv: list[str], environ: dict[str, str] | None = None) -> ServerSettings:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return from_args(parser.parse_args(argv), environ or {})


def test_defaults_are_designs() -> None:
    settings = parse([])
    assert settings.listen == Address("127.0.0.1", 50051)
    assert settings.worker_listen == Address("127.0.0.1", 50052)
    assert settings.metrics_listen == Address("127.0.0.1", 9464)
    assert settings.lease_timeout == timedelta(seconds=30)
    assert (settings.max_attempts, settings.max_payload_bytes) == (3, 4 * 1024 * 1024)
    assert settings.run_timeout == timedelta(seconds=3600)
    assert settings.queue_timeout == timedelta(seconds=1800)
    assert settings.result_ttl == timedelta(seconds=86400)
    assert (settings.max_group_children, settings.max_live_per_tenant) == (1000, 10_000)
    assert settings.max_live_total == 100_000
    assert (settings.redis_partition, settings.grace_period) == ("default", timedelta(seconds=10))


def test_every_flag_has_an_env_twin() -> None:
    names = {flag.env for flag in FLAGS}
    assert {"JOBGATE_REDIS_URL", "JOBGATE_LEASE_TIMEOUT", "JOBGATE_MAX_LIVE_TOTAL"} <= names
    settings = parse([], {"JOBGATE_LEASE_TIMEOUT": "0.25", "JOBGATE_LISTEN": "[::1]:0"})
    assert settings.lease_timeout == timedelta(seconds=0.25)
    assert settings.listen == Address("::1", 0)


def test_flag_wins_over_env() -> None:
    settings = parse(["--max-attempts", "5"], {"JOBGATE_MAX_ATTEMPTS": "7"})
    assert settings.max_attempts == 5


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        (["--lease-timeout", "soon"], {}, "--lease-timeout"),
        (["--lease-timeout", "-1"], {}, "--lease-timeout"),
        (["--listen", "nowhere"], {}, "--listen"),
        (["--max-attempts", "0"], {}, "--max-attempts"),
        (["--log-format", "xml"], {}, "--log-format"),
        ([], {"JOBGATE_GRACE_PERIOD": "nan"}, "JOBGATE_GRACE_PERIOD"),
        (["--tls-cert", "c.pem"], {}, "--tls-key"),
    ],
)
def test_bad_value_names_its_flag(argv: list[str], environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        parse(argv, environ)


def test_metrics_listener_can_be_turned_off() -> None:
    assert parse(["--metrics-listen", "off"]).metrics_listen is None


def test_each_flags_help_quotes_its_default_from_the_settings() -> None:
    defaults = ServerSettings()
    for flag in FLAGS:
        shown = default_text(getattr(defaults, flag.name))
        if shown is not None and not flag.name.endswith("_bytes"):
            assert f"(default {shown})" in help_text(flag), flag.name
    assert "(default 4 MiB)" in help_text(_flag("max_payload_bytes"))


def test_the_server_defaults_are_the_stores() -> None:
    assert ServerSettings().store_settings() == StoreSettings()


def test_retry_backoff_max_reaches_the_store() -> None:
    settings = parse(["--retry-backoff", "90", "--retry-backoff-max", "600"])
    store = settings.store_settings()
    assert (store.retry_backoff_base, store.retry_backoff_max) == (
        timedelta(seconds=90),
        timedelta(seconds=600),
    )


def test_a_retry_backoff_over_its_max_is_refused_not_capped() -> None:
    with pytest.raises(SettingsError, match="--retry-backoff-max"):
        parse(["--retry-backoff", "120"])


@pytest.mark.parametrize("name", ["a/b", "p" * 65, "ünï", "a b", "{x}"])
def test_a_partition_the_store_refuses_is_reported_against_its_flag(name: str) -> None:
    with pytest.raises(SettingsError, match="--redis-partition"):
        parse(["--redis-partition", name])


@pytest.mark.parametrize("name", ["default", "prod-eu.1", "A_b"])
def test_every_partition_the_flag_accepts_the_store_keys_accept(name: str) -> None:
    assert Keys(parse(["--redis-partition", name]).redis_partition).partition == name


def _flag(name: str) -> _Flag:
    return next(flag for flag in FLAGS if flag.name == name)


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        ([], {}, False),
        (["--log-transitions", "on"], {}, True),
        (["--log-transitions", "off"], {"JOBGATE_LOG_TRANSITIONS": "on"}, False),
        ([], {"JOBGATE_LOG_TRANSITIONS": "yes"}, True),
    ],
)
def test_transition_lines_are_opt_in(
    argv: list[str], environ: dict[str, str], expected: bool
) -> None:
    assert parse(argv, environ).log_transitions is expected


def test_a_bad_switch_names_its_flag() -> None:
    with pytest.raises(SettingsError, match="--log-transitions"):
        parse(["--log-transitions", "maybe"])


def test_a_switch_shows_its_default_as_off() -> None:
    [flag] = [flag for flag in FLAGS if flag.name == "log_transitions"]
    assert "(default off)" in help_text(flag)


def test_redis_partitions_defaults_to_one() -> None:
    assert parse([]).redis_partitions == 1


def test_redis_partitions_comes_from_the_flag_over_the_environment() -> None:
    assert (
        parse(["--redis-partitions", "12"], {"JOBGATE_REDIS_PARTITIONS": "4"}).redis_partitions
        == 12
    )
    assert parse([], {"JOBGATE_REDIS_PARTITIONS": "4"}).redis_partitions == 4


@pytest.mark.parametrize("value", ["0", "1025", "-3", "two", ""])
def test_a_partition_count_out_of_range_is_reported_against_its_flag(value: str) -> None:
    with pytest.raises(SettingsError, match=r"^--redis-partitions: expected"):
        parse(["--redis-partitions", value])


def test_a_bad_partition_count_in_the_environment_names_the_variable() -> None:
    with pytest.raises(SettingsError, match=r"^JOBGATE_REDIS_PARTITIONS: expected 1\.\.1024"):
        parse([], {"JOBGATE_REDIS_PARTITIONS": "2000"})


def test_fair_share_defaults_to_tenant_and_reaches_the_store() -> None:
    settings = parse([])
    assert (settings.fair_share, settings.store_settings().fair_share) == ("tenant", True)


@pytest.mark.parametrize(
    ("argv", "environ"),
    [(["--fair-share", "off"], {}), ([], {"JOBGATE_FAIR_SHARE": "OFF"})],
)
def test_fair_share_off_keeps_one_fifo_order_in_the_store(
    argv: list[str], environ: dict[str, str]
) -> None:
    settings = parse(argv, environ)
    assert (settings.fair_share, settings.store_settings().fair_share) == ("off", False)


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        (["--fair-share", "weighted"], {}, "--fair-share"),
        ([], {"JOBGATE_FAIR_SHARE": ""}, "JOBGATE_FAIR_SHARE"),
        (["--data-sync", "always"], {}, "--data-sync"),
        (["--data-dir", ""], {}, "--data-dir"),
        (["--console-listen", "nowhere"], {}, "--console-listen"),
        ([], {"JOBGATE_CONSOLE_LISTEN": "host:99999"}, "JOBGATE_CONSOLE_LISTEN"),
    ],
)
def test_a_bad_placement_or_storage_setting_names_its_flag(
    argv: list[str], environ: dict[str, str], named: str
) -> None:
    with pytest.raises(SettingsError, match=f"^{named}: "):
        parse(argv, environ)


def test_the_embedded_store_is_in_memory_and_synced_fully_by_default() -> None:
    settings = parse([])
    assert (settings.data_dir, settings.data_sync, settings.console_listen) == (None, "full", None)


def test_data_dir_sync_and_console_come_from_flags_or_the_environment() -> None:
    environ = {"JOBGATE_DATA_DIR": "/env/dir", "JOBGATE_DATA_SYNC": "normal"}
    settings = parse(["--data-dir", "/var/lib/jobgate", "--console-listen", "[::1]:8080"], environ)
    assert settings.data_dir == "/var/lib/jobgate"
    assert settings.data_sync == "normal"
    assert settings.console_listen == Address("::1", 8080)


def test_the_console_listener_can_be_turned_off_explicitly() -> None:
    assert parse(["--console-listen", "off"]).console_listen is None
