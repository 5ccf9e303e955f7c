"""The shared policy: the Lua include says what store/policy.py says, and the scripts use it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis

from jobgate.v1.limits import MAX_JOBS_PER_CLAIM
from store import policy
from store.codes import LuaCode
from store.model import (
    ERROR_ATTEMPTS_EXHAUSTED,
    ERROR_CANCELLED,
    ERROR_LEASE_EXPIRED,
    ERROR_QUEUE_TIMEOUT,
    ERROR_RUN_TIMEOUT,
    JobKind,
    JobStatus,
    StoreSettings,
)
from store.policy import (
    GROUP_MESSAGE,
    LEASE_EXPIRED_MESSAGE,
    RUN_TIMEOUT_MESSAGE,
    child_key,
    claim_limit,
    exhausted_message,
    group_outcome,
    lua_policy,
    retry_delay,
)
from tests.redis_server import RedisServer

LUA_DIR = Path(__file__).resolve().parents[2] / "store" / "lua"
DECLARED = (LUA_DIR / "includes" / "declared.lua").read_text()
COMMON = (LUA_DIR / "includes" / "common.lua").read_text()
# Status and kind values that are never also a hash field name ('completed' is one).
VALUES = [s.value for s in JobStatus if s is not JobStatus.COMPLETED] + [k.value for k in JobKind]
ERROR_CODES = [
    ERROR_ATTEMPTS_EXHAUSTED,
    ERROR_CANCELLED,
    ERROR_LEASE_EXPIRED,
    ERROR_QUEUE_TIMEOUT,
    ERROR_RUN_TIMEOUT,
]


@pytest.mark.parametrize("path", sorted(LUA_DIR.rglob("*.lua")), ids=lambda path: path.name)
def test_no_script_spells_a_status_kind_or_error_code(path: Path) -> None:
    text = path.read_text().split("]]", 1)[-1]  # the header may name them
    assert not [value for value in VALUES if f"'{value}'" in text]
    assert not re.search(r"[=~]= 'completed'|, 'completed', ''", text)
    assert not [code for code in ERROR_CODES if f"'{code}'" in text]


def test_the_include_names_every_status_kind_and_return_code() -> None:
    include = lua_policy()
    for status in JobStatus:
        assert f"{status.name} = '{status.value}'" in include
    for kind in JobKind:
        assert f"{kind.name} = '{kind.value}'" in include
    for code in LuaCode:
        assert f"{code.name} = {code.value}" in include
    assert f"ATTEMPTS_EXHAUSTED = '{ERROR_ATTEMPTS_EXHAUSTED}'" in include


def test_a_childs_key_is_the_parent_key_and_its_index() -> None:
    assert (child_key("order-7", 2), child_key("", 2)) == ("order-7#2", "")


def test_group_outcome_is_completed_failed_or_partial() -> None:
    assert group_outcome(3, 3) == (JobStatus.COMPLETED, "")
    assert group_outcome(3, 0) == (JobStatus.FAILED, "3 of 3 children did not complete")
    assert group_outcome(3, 1) == (JobStatus.PARTIAL, "2 of 3 children did not complete")


def test_a_claim_takes_between_one_and_max_claim_jobs() -> None:
    assert [claim_limit(n) for n in (0, 5, MAX_JOBS_PER_CLAIM + 1)] == [1, 5, MAX_JOBS_PER_CLAIM]


def test_an_exhausted_message_without_a_message_is_the_code() -> None:
    assert exhausted_message("E", "") == "E"
    assert exhausted_message("E", "boom") == "E: boom"


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    await client.aclose()


async def _lua(client: Redis, body: str, *args: str | int) -> object:
    """Run `body` after the generated includes and common.lua (dummy keys, no writes)."""
    source = lua_policy() + DECLARED + COMMON + body
    keys = [f"policy-test:{{p}}:{i}" for i in range(10)]
    # nothing declared: the tail is the first group's KEYS index and three zero counts
    tail = (len(keys) + 1, 0, 0, 0)
    reply: object = await client.eval(
        source,
        len(keys),
        *keys,
        "policy-test:{p}:notify",
        "policy-test:{p}:changes",
        10,
        1000,
        *args,
        *tail,
    )
    return reply


@pytest.mark.redis
@pytest.mark.parametrize(
    ("template", "call", "fields"),
    [
        (GROUP_MESSAGE, "group_message(ARGV[5], ARGV[6])", {"failed": "2", "total": "5"}),
        (LEASE_EXPIRED_MESSAGE, "lease_expired_message(ARGV[5])", {"attempts": "3"}),
        (RUN_TIMEOUT_MESSAGE, "run_timeout_message(ARGV[5])", {"attempts": "3"}),
    ],
)
async def test_lua_messages_are_the_python_templates(
    redis_client: Redis, template: str, call: str, fields: dict[str, str]
) -> None:
    lua = await _lua(redis_client, f"\nreturn {call}", *fields.values())
    assert lua == template.format(**fields)


@pytest.mark.redis
async def test_lua_exhausted_message_is_the_python_one(redis_client: Redis) -> None:
    body = "\nreturn exhausted_message_of(ARGV[5], ARGV[6])"
    assert await _lua(redis_client, body, "E", "boom") == exhausted_message("E", "boom")


@pytest.mark.redis
@pytest.mark.parametrize("attempts", [1, 2, 3, 9])
async def test_lua_backoff_is_retry_delay(redis_client: Redis, attempts: int) -> None:
    settings = StoreSettings(
        retry_backoff_base=timedelta(milliseconds=250), retry_backoff_max=timedelta(seconds=10)
    )
    body = "\nreturn backoff_ms(tonumber(ARGV[5]), 250, 10000)"
    delay_ms = await _lua(redis_client, body, attempts)
    assert delay_ms == retry_delay(attempts, settings) // timedelta(milliseconds=1)


def test_a_crowd_of_watchers_on_one_queue_waits_longer_between_position_reads() -> None:
    assert policy.position_settle(0) == policy.POSITION_SETTLE
    assert policy.position_settle(100) == policy.POSITION_SETTLE
    # 2,000 watchers share POSITION_READS_PER_SECOND re-reads: one each 4 s.
    assert policy.position_settle(2000) == 2000 / policy.POSITION_READS_PER_SECOND
