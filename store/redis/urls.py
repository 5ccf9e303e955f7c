"""Parsing `--redis-url`: which Redis topology a URL names, refused early when malformed.

Forms (DESIGN, "Redis topologies"):

- `redis://[[user]:password@]host[:port][/db]`, `rediss://...` (TLS) and
  `unix:///path` name one server; redis-py reads them itself.
- `redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/<master>[/db]`
  names a Sentinel-managed primary: the hosts are sentinels (port 26379
  when omitted), `<master>` is the name they monitor, and the credentials
  are the primary's (sentinels are contacted without them).
- `redis+cluster://[[user]:password@]host:port[,host:port...]` names a Redis
  Cluster: the hosts are seed nodes (any reachable one tells the client the
  whole topology; port 6379 when omitted); no database (Cluster has only 0),
  no query parameters.

`store.redis.pools.Connector` then builds every connection pool the store uses for that
topology; on Sentinel each of them asks the sentinels for the primary on
every new connection, so all of them follow a failover. On Cluster it builds
redis-py's asyncio cluster client instead, which follows MOVED and ASK
redirections and re-reads the slot map after one (or after a node failed).

Every refusal is a `BadRedisUrl` (a ValueError) whose message names what is
wrong, so the servers report it against `--redis-url` before connecting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

SINGLE_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_CLUSTER_PORT = 6379

# A master name as sentinel.conf accepts it: no spaces, no slash.
_MASTER_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_MAX_QUOTED = 128


class BadRedisUrl(ValueError):
    """A `--redis-url` that names no usable Redis; the message says why."""


@dataclass(frozen=True)
class SingleServer:
    """One Redis server; `url` is handed to redis-py as it is."""

    url: str


@dataclass(frozen=True)
class SentinelTarget:
    """A primary found through sentinels; the clients follow its failovers."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None


@dataclass(frozen=True)
class ClusterTarget:
    """A Redis Cluster known by its seed nodes; the client discovers the rest."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None


RedisTarget = SingleServer | SentinelTarget | ClusterTarget


def parse_redis_url(url: str) -> RedisTarget:
    """The topology `url` names, or BadRedisUrl."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise BadRedisUrl(f"{_quote(url)} is not a URL: use redis://HOST:PORT/DB")
    scheme = scheme.lower()
    if scheme in SINGLE_SCHEMES:
        return _single(url, scheme)
    if scheme == SENTINEL_SCHEME:
        return _sentinel(rest)
    if scheme == CLUSTER_SCHEME:
        return _cluster(rest)
    supported = ", ".join(
        f"{name}://" for name in (*SINGLE_SCHEMES, SENTINEL_SCHEME, CLUSTER_SCHEME)
    )
    raise BadRedisUrl(f"unknown scheme {_quote(scheme)}://: use one of {supported}")


def _single(url: str, scheme: str) -> SingleServer:
    if scheme == "unix":
        return SingleServer(url)
    parts = urlsplit(url)
    # Quote the address, never the whole URL: it may carry a password.
    address = parts.netloc.rpartition("@")[2]
    try:
        parts.port  # noqa: B018 - urllib validates the port when it is read
    except ValueError:
        raise BadRedisUrl(f"bad port in {_quote(address)}: expected HOST:PORT") from None
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise BadRedisUrl(f"bad database {_quote(db)}: expected /DB, a number")
    return SingleServer(url)


def _sentinel(rest: str) -> SentinelTarget:
    location = _without_query(rest, SENTINEL_SCHEME)
    netloc, slash, path = location.partition("/")
    sentinels, username, password = _hosts(
        netloc, SENTINEL_SCHEME, "sentinel", DEFAULT_SENTINEL_PORT
    )
    segments = path.split("/") if slash else []
    if not segments or not segments[0]:
        raise BadRedisUrl(
            "redis+sentinel:// needs the master name: redis+sentinel://HOST:PORT/<master>[/db]"
        )
    if len(segments) > 2 or (len(segments) == 2 and not segments[1].isdigit()):
        raise BadRedisUrl(f"bad path {_quote('/' + path)}: expected /<master>[/db]")
    master = unquote(segments[0])
    if not _MASTER_NAME.fullmatch(master):
        raise BadRedisUrl(f"bad master name {_quote(master)}")
    db = int(segments[1]) if len(segments) == 2 else 0
    return SentinelTarget(sentinels, master, db, username, password)


def _cluster(rest: str) -> ClusterTarget:
    location = _without_query(rest, CLUSTER_SCHEME)
    netloc, _, path = location.partition("/")
    if path:
        # Cluster serves database 0 only; a /db would be silently wrong.
        raise BadRedisUrl(
            f"bad path {_quote('/' + path)}: redis+cluster:// takes no database "
            "(Redis Cluster has only database 0)"
        )
    nodes, username, password = _hosts(netloc, CLUSTER_SCHEME, "node", DEFAULT_CLUSTER_PORT)
    return ClusterTarget(nodes, username, password)


def _without_query(rest: str, scheme: str) -> str:
    """The URL after "<scheme>://" up to its query, refused if it has one."""
    location, _, query = rest.partition("?")
    if query:
        raise BadRedisUrl(f"{scheme}:// takes no query parameters, got {_quote(query)}")
    return location


def _hosts(
    netloc: str, scheme: str, role: str, default_port: int
) -> tuple[tuple[tuple[str, int], ...], str | None, str | None]:
    """(hosts, username, password) of a sentinel or cluster URL's
    [user:password@]HOST[:PORT],...; `role` names a host in errors."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        hosts = netloc
    username, password = _credentials(userinfo) if at else (None, None)
    if not hosts:
        raise BadRedisUrl(f"{scheme}:// needs at least one {role} HOST:PORT")
    return (
        tuple(_host_port(item, role, default_port) for item in hosts.split(",")),
        username,
        password,
    )


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    user, colon, password = userinfo.partition(":")
    if not colon:
        # "secret@host" is redis-py's reading of a lone word as the password.
        return None, unquote(user) or None
    return unquote(user) or None, unquote(password) or None


def _host_port(item: str, role: str, default_port: int) -> tuple[str, int]:
    """ "host", "host:port" or "[v6]:port" -> (host, port); `role` names it in errors."""
    if item.startswith("["):
        host, bracket, tail = item[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise BadRedisUrl(f"bad {role} address {_quote(item)}: expected [IPV6]:PORT")
        port_text = tail[1:] if tail else ""
    else:
        host, colon, port_text = item.rpartition(":")
        if not colon:
            host, port_text = item, ""
        if ":" in host:
            raise BadRedisUrl(f"bad {role} address {_quote(item)}: bracket IPv6 as [ADDR]:PORT")
    if not host:
        raise BadRedisUrl(f"bad {role} address {_quote(item)}: expected HOST:PORT")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadRedisUrl(f"bad port in {role} address {_quote(item)}: expected 1-65535")
    return host, int(port_text)


def _quote(text: str) -> str:
    """repr() of at most _MAX_QUOTED characters: an error never echoes an unbounded value."""
    if len(text) > _MAX_QUOTED:
        return repr(text[:_MAX_QUOTED]) + "..."
    return repr(text)
