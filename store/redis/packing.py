"""Commands packed in C (hiredis), for the store's asyncio connections.

redis-py's sync client packs commands with hiredis when it is installed;
its asyncio connections pack in Python, one encode call per argument. The
store's script calls carry 40-70 arguments (every declared key, store/
keys.py), so that cost 44 µs a call here against 4 µs for hiredis, a few
per cent of each server's CPU per job (py-spy, bench e2e). The bytes sent
are the same; an argument hiredis does not take (a bytearray) falls back to
redis-py's packing.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import hiredis
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection


class HiredisPacking(AbstractConnection):
    def pack_command(self, *args: Any) -> list[bytes]:
        # As redis-py's: a command name with spaces ("SCRIPT LOAD") is several words.
        words = args
        if isinstance(args[0], str):
            words = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            words = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(words)]
        except TypeError:
            return super().pack_command(*args)


class PackedConnection(HiredisPacking, Connection):
    pass


class PackedSSLConnection(HiredisPacking, SSLConnection):
    pass


class PackedUnixConnection(HiredisPacking, UnixDomainSocketConnection):
    pass


class PackedSentinelConnection(HiredisPacking, SentinelManagedConnection):
    pass


class PackedSentinelSSLConnection(HiredisPacking, SentinelManagedSSLConnection):
    pass


_PACKED: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: PackedConnection,
    SSLConnection: PackedSSLConnection,
    UnixDomainSocketConnection: PackedUnixConnection,
    SentinelManagedConnection: PackedSentinelConnection,
    SentinelManagedSSLConnection: PackedSentinelSSLConnection,
}


C = TypeVar("C", bound=AbstractConnection)


def packed(connection_class: type[C]) -> type[C]:
    """The hiredis-packing subclass of `connection_class` (itself if there is none)."""
    return cast(type[C], _PACKED.get(connection_class, connection_class))
