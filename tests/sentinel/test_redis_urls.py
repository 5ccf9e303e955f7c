"""--redis-url parsing: every topology's form, and a clear refusal for every malformed one."""

from __future__ import annotations

import pytest

from store import StoreSettings, open_store
from store.redis.urls import (
    DEFAULT_SENTINEL_PORT,
    BadRedisUrl,
    SentinelTarget,
    SingleServer,
    parse_redis_url,
)
from tests.launcher import run_to_exit


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://:pw@redis.example:6380/2", "unix:///tmp/r.sock"]
)
def test_single_server_urls_pass_through_unchanged(url: str) -> None:
    assert parse_redis_url(url) == SingleServer(url)


def test_sentinel_url_names_every_sentinel_and_the_master() -> None:
    target = parse_redis_url("redis+sentinel://10.0.0.1:26379,sentinel-b:26380/jobgate")
    assert target == SentinelTarget((("10.0.0.1", 26379), ("sentinel-b", 26380)), "jobgate")


def test_sentinel_url_reads_password_and_db() -> None:
    target = parse_redis_url("redis+sentinel://:s%40cret@h:1/jobgate/3")
    assert target == SentinelTarget((("h", 1),), "jobgate", db=3, password="s@cret")


def test_sentinel_url_reads_user_and_password() -> None:
    target = parse_redis_url("redis+sentinel://app:pw@h:1/jobgate")
    assert isinstance(target, SentinelTarget)
    assert (target.username, target.password) == ("app", "pw")


def test_sentinel_port_defaults_to_26379() -> None:
    target = parse_redis_url("redis+sentinel://h1,h2:5/m")
    assert isinstance(target, SentinelTarget)
    assert target.sentinels == (("h1", DEFAULT_SENTINEL_PORT), ("h2", 5))


def test_sentinel_url_takes_bracketed_ipv6() -> None:
    target = parse_redis_url("redis+sentinel://[::1]:26379/m")
    assert isinstance(target, SentinelTarget)
    assert target.sentinels == (("::1", 26379),)


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("mysql://h:1/0", "unknown scheme 'mysql'"),
        ("http://example.invalid/", "unknown scheme 'http'"),
        ("127.0.0.1:6379", "is not a URL"),
        ("redis://h:port/0", "bad port"),
        ("redis://h:70000/0", "bad port"),
        ("redis://h:1/zero", "bad database"),
        ("redis+sentinel://h:1", "needs the master name"),
        ("redis+sentinel://h:1/", "needs the master name"),
        ("redis+sentinel:///jobgate", "at least one sentinel"),
        ("redis+sentinel://h:x/jobgate", "bad port in sentinel address 'h:x'"),
        ("redis+sentinel://h:0/jobgate", "bad port"),
        ("redis+sentinel://h:1,,h:2/jobgate", "bad sentinel address ''"),
        ("redis+sentinel://:1/jobgate", "bad sentinel address ':1'"),
        ("redis+sentinel://::1:5/jobgate", "bracket IPv6"),
        ("redis+sentinel://h:1/jobgate/x", "bad path"),
        ("redis+sentinel://h:1/jobgate/0/9", "bad path"),
        ("redis+sentinel://h:1/job%20gate", "bad master name"),
        ("redis+sentinel://h:1/jobgate?ssl=true", "no query parameters"),
    ],
)
def test_malformed_url_is_refused_naming_the_problem(url: str, complaint: str) -> None:
    with pytest.raises(BadRedisUrl) as raised:
        parse_redis_url(url)
    assert complaint in str(raised.value)


def test_refusal_never_echoes_the_password() -> None:
    with pytest.raises(BadRedisUrl) as raised:
        parse_redis_url("redis://:hunter2@h:port/0")
    assert "hunter2" not in str(raised.value)


def test_refusal_quotes_at_most_128_characters() -> None:
    with pytest.raises(BadRedisUrl) as raised:
        parse_redis_url("redis+sentinel://h:1/" + "m" * 5000)
    assert len(str(raised.value)) < 300


def test_open_store_refuses_a_bad_url_before_connecting() -> None:
    with pytest.raises(ValueError, match="needs the master name"):
        open_store("redis+sentinel://127.0.0.1:1", StoreSettings())


@pytest.mark.parametrize("command", ["gateway", "worker-server"])
def test_server_refuses_a_bad_sentinel_url_naming_the_flag(command: str) -> None:
    code, output = run_to_exit(command, {"redis-url": "redis+sentinel://127.0.0.1:1"})
    assert code != 0
    assert "--redis-url: redis+sentinel:// needs the master name" in output
