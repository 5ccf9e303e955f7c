"""redis+cluster:// parsing: the seed nodes and credentials, and a clear refusal for every
malformed form."""

from __future__ import annotations

import pytest

from store import StoreSettings, open_store
from store.redis.pools import BoundedCluster, Connector
from store.redis.urls import (
    DEFAULT_CLUSTER_PORT,
    BadRedisUrl,
    ClusterTarget,
    parse_redis_url,
)
from tests.launcher import run_to_exit


def test_cluster_url_names_every_seed_node() -> None:
    target = parse_redis_url("redis+cluster://10.0.0.1:7000,node-b:7001")
    assert target == ClusterTarget((("10.0.0.1", 7000), ("node-b", 7001)))


def test_cluster_url_reads_user_and_password() -> None:
    target = parse_redis_url("redis+cluster://app:p%40ss@h:7000")
    assert target == ClusterTarget((("h", 7000),), username="app", password="p@ss")


def test_cluster_url_reads_a_lone_password() -> None:
    target = parse_redis_url("redis+cluster://:pw@h:7000")
    assert target == ClusterTarget((("h", 7000),), password="pw")


def test_cluster_port_defaults_to_6379() -> None:
    target = parse_redis_url("redis+cluster://h1,h2:5")
    assert isinstance(target, ClusterTarget)
    assert target.nodes == (("h1", DEFAULT_CLUSTER_PORT), ("h2", 5))


def test_cluster_url_takes_bracketed_ipv6() -> None:
    target = parse_redis_url("redis+cluster://[::1]:7000")
    assert isinstance(target, ClusterTarget)
    assert target.nodes == (("::1", 7000),)


def test_cluster_url_may_end_in_a_slash() -> None:
    assert parse_redis_url("redis+cluster://h:7000/") == ClusterTarget((("h", 7000),))


def test_cluster_url_builds_a_cluster_client_seeded_with_every_node() -> None:
    connector = Connector("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", 1.0, 0.5)
    client = connector.client(1.0, 0.5, retries=1, connections=8)
    assert isinstance(client, BoundedCluster)
    seeds = sorted(node.name for node in client.nodes_manager.startup_nodes.values())
    assert seeds == ["127.0.0.1:7000", "127.0.0.1:7001"]


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("redis+cluster://", "at least one node"),
        ("redis+cluster://app:pw@", "at least one node"),
        ("redis+cluster://h:1/0", "takes no database"),
        ("redis+cluster://h:1?ssl=true", "no query parameters"),
        ("redis+cluster://h:x", "bad port in node address 'h:x'"),
        ("redis+cluster://h:0", "bad port in node address"),
        ("redis+cluster://h:70000", "bad port in node address"),
        ("redis+cluster://h:1,,h:2", "bad node address ''"),
        ("redis+cluster://:1", "bad node address ':1'"),
        ("redis+cluster://::1:7000", "bracket IPv6"),
        ("redis+cluster://[::1", "bad node address '[::1'"),
    ],
)
def test_malformed_cluster_url_is_refused_naming_the_problem(url: str, complaint: str) -> None:
    with pytest.raises(BadRedisUrl) as raised:
        parse_redis_url(url)
    assert complaint in str(raised.value)


def test_unknown_scheme_lists_redis_cluster() -> None:
    with pytest.raises(BadRedisUrl, match=r"redis\+cluster://"):
        parse_redis_url("memcache://h:1")


def test_cluster_refusal_never_echoes_the_password() -> None:
    with pytest.raises(BadRedisUrl) as raised:
        parse_redis_url("redis+cluster://:hunter2@h:port")
    assert "hunter2" not in str(raised.value)


def test_open_store_refuses_a_bad_cluster_url_before_connecting() -> None:
    with pytest.raises(ValueError, match="takes no database"):
        open_store("redis+cluster://127.0.0.1:1/3", StoreSettings())


@pytest.mark.parametrize("command", ["gateway", "worker-server"])
def test_server_refuses_a_bad_cluster_url_naming_the_flag(command: str) -> None:
    code, output = run_to_exit(command, {"redis-url": "redis+cluster://127.0.0.1:1/3"})
    assert code != 0
    assert "--redis-url: bad path '/3': redis+cluster:// takes no database" in output
