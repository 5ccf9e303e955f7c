"""The store's connections pack commands with hiredis (store/redis/packing.py)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.typing import EncodableT

from store.model import JobSpec, StoreSettings, SubmitRequest
from store.redis import RedisStore
from store.redis.packing import PackedConnection, packed
from tests.redis_server import RedisServer

# A script call shaped like the store's: a sha, declared keys, numbers, a payload.
SCRIPT_CALL: tuple[EncodableT, ...] = (
    "EVALSHA",
    "a" * 40,
    40,
    *[f"jobgate:{{default}}:job:01JABCDEFGHJKMNPQRSTVWXY{i:02d}" for i in range(40)],
    *[str(i) for i in range(20)],
    12345,
    -7,
    0.25,
    "tenant é",
    b"\x00payload\xff",
)


def python_packed(*args: EncodableT) -> bytes:
    return b"".join(bytes(chunk) for chunk in Connection().pack_command(*args))


def c_packed(*args: EncodableT) -> bytes:
    return b"".join(PackedConnection().pack_command(*args))


def test_a_script_call_packs_to_the_same_bytes_as_redis_py() -> None:
    assert c_packed(*SCRIPT_CALL) == python_packed(*SCRIPT_CALL)


def test_a_command_name_with_a_space_is_sent_as_two_words() -> None:
    assert c_packed("SCRIPT LOAD", "return 1") == python_packed("SCRIPT LOAD", "return 1")


def test_an_argument_hiredis_does_not_take_falls_back_to_redis_py() -> None:
    assert c_packed("SET", "k", bytearray(b"v")) == python_packed("SET", "k", bytearray(b"v"))


@pytest.mark.parametrize("plain", [Connection, SSLConnection, UnixDomainSocketConnection])
def test_every_kind_of_connection_has_a_packing_subclass(plain: type[Connection]) -> None:
    assert issubclass(packed(plain), plain) and packed(plain) is not plain


async def test_the_store_talks_to_redis_over_packing_connections(
    redis_server: RedisServer, partition: str
) -> None:
    store = RedisStore(redis_server.url, StoreSettings(), partition=partition)
    await store.open()
    try:
        job = (await store.submit(SubmitRequest("acme", JobSpec("llm", b"input")))).job
        assert (await store.get("acme", job.id)).id == job.id
        client = store.engine.connection.rpc
        assert isinstance(client, Redis)
        assert client.connection_pool.connection_class is PackedConnection
    finally:
        await store.close()
