"""Start-up checks and Redis settings (DESIGN: Redis settings are checked; issue 4 item 2).

A server that cannot run safely refuses to start with one clear line and a
non-zero exit, never a traceback; a Redis out of memory refuses new work but
lets running work finish.
"""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

from tests.e2e.api import COMPLETED, Api, Failure, failure_of, fresh_name
from tests.e2e.harness import FAST_SETTINGS, Deployment, ServerProcess, run_to_exit
from tests.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis


def assert_one_line_refusal(code: int, output: str, mentions: str) -> None:
    assert code != 0, output
    assert "Traceback" not in output, output
    assert mentions in output.lower(), output


def test_server_refuses_an_evicting_maxmemory_policy(tmp_path: Path) -> None:
    evicting = RedisServer(tmp_path / "redis", "--maxmemory-policy", "allkeys-lru")
    evicting.start()
    try:
        code, output = run_to_exit("gateway", {**FAST_SETTINGS, "redis-url": evicting.url})
    finally:
        evicting.kill()

    assert_one_line_refusal(code, output, "maxmemory-policy")


def test_server_with_unreachable_redis_exits_with_one_line(tmp_path: Path) -> None:
    dead_url = f"redis://127.0.0.1:{free_port()}/0"

    code, output = run_to_exit("worker-server", {**FAST_SETTINGS, "redis-url": dead_url})

    assert_one_line_refusal(code, output, "redis")


def test_bad_flag_value_exits_with_one_line_naming_the_flag() -> None:
    code, output = run_to_exit("serve", {"lease-timeout": "soon"})

    assert_one_line_refusal(code, output, "lease-timeout")
    assert len(output.strip().splitlines()) == 1, output


def test_bad_environment_value_exits_with_one_line_naming_it() -> None:
    code, output = run_to_exit("serve", {}, env={"JOBGATE_MAX_ATTEMPTS": "many"})

    assert_one_line_refusal(code, output, "max")
    assert len(output.strip().splitlines()) == 1, output


def redis_command(redis: RedisServer, *args: str) -> bytes:
    """One command over a raw socket (RESP), so the test needs no redis-cli."""
    request = f"*{len(args)}\r\n".encode()
    for arg in args:
        request += f"${len(arg.encode())}\r\n{arg}\r\n".encode()
    with socket.create_connection(("127.0.0.1", redis.port), timeout=5) as sock:
        sock.sendall(request)
        reply = b""
        while not complete(reply):
            reply += sock.recv(65536)
    return reply


def complete(reply: bytes) -> bool:
    """A whole simple reply, or a whole bulk string ($<len> header plus body)."""
    if b"\r\n" not in reply:
        return False
    header, _, body = reply.partition(b"\r\n")
    if header.startswith(b"$"):
        return len(body) >= int(header[1:]) + 2
    return True


def limit_memory(redis: RedisServer, headroom: int) -> None:
    """Cap Redis (noeviction) at its current use plus `headroom` bytes."""
    info = redis_command(redis, "INFO", "memory").decode()
    used = next(
        int(line.split(":")[1]) for line in info.splitlines() if line.startswith("used_memory:")
    )
    assert redis_command(redis, "CONFIG", "SET", "maxmemory", str(used + headroom)) == b"+OK\r\n"


async def submit_until_refused(api: Api, model: str) -> Failure:
    for _ in range(200):
        try:
            await api.submit(model, b"x" * 100_000)
        except grpc.aio.AioRpcError:
            return await failure_of(api.submit(model, b"x" * 100_000))
    raise AssertionError("Redis never ran out of memory")


async def test_redis_out_of_memory_refuses_submit_but_running_work_finishes(
    own_api: Api, own_redis: RedisServer
) -> None:
    model = fresh_name("m")
    running = await own_api.submit(model)
    claimed = await own_api.claim_one(model)
    waiting = await own_api.submit(model)
    limit_memory(own_redis, headroom=2_000_000)

    refused = await submit_until_refused(own_api, fresh_name("m"))

    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
    assert refused.reason == "QUEUE_FULL", refused
    assert refused.retry_delay is not None, refused
    assert not (await own_api.heartbeat(running.id, claimed.lease_id, 0.5)).cancel_requested
    assert (await own_api.complete(running.id, claimed.lease_id, b"ok")).status == COMPLETED
    assert (await own_api.cancel(waiting.id)).cancelled


def persistence_warnings(process: ServerProcess) -> list[str]:
    lines = process.log_tail().lower().splitlines()
    return [line for line in lines if "warn" in line and "persistence" in line]


def test_server_warns_at_start_when_redis_persistence_is_off(on_shared_redis: Deployment) -> None:
    # The session redis-server runs with appendonly no and no save rules.
    for process in on_shared_redis.processes:
        assert persistence_warnings(process), process.log_tail()


def test_server_does_not_warn_when_redis_persists(on_own_redis: Deployment) -> None:
    # own_redis runs with appendonly yes.
    for process in on_own_redis.processes:
        assert not persistence_warnings(process), process.log_tail()
