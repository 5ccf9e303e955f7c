"""Floors: what the parts jobgate is built on cost alone, on this machine, in this run.

A job costs at least two unary calls (Submit; ReportAndClaim on the worker
side) and a few Redis script calls. Measured here with nothing of jobgate's
around them, so each process's CPU per job in section 4 can be split into
the floor and jobgate's own work:

- a bare grpc.aio unary echo (generic handler, 100 bytes each way), server
  and client on asyncio's loop as jobgate's are: CPU per call on each side
  and calls/s, one at a time;
- redis-py's asyncio client sending EVALSHA of `return 1`, and of a script
  call shaped like the store's (60 arguments): client CPU per call;
- Redis's own time per call of those two scripts (INFO commandstats).

    python -m bench.floors [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from redis.asyncio import Redis

from store.redis.packing import PackedConnection
from tests.redis_server import RedisServer

_METHOD = "/bench.Echo/Echo"
# Shaped like a store transition: a sha, 40 declared keys, 20 small args.
_WIDE_SCRIPT = "for i = 1, #KEYS do redis.call('EXISTS', KEYS[i]) end return 1"
_KEYS = [f"jobgate:{{default}}:job:01JABCDEFGHJKMNPQRSTVWXY{i:02d}" for i in range(40)]


@dataclass(frozen=True)
class Floors:
    echo_server_ms: float  # server CPU per unary call
    echo_client_ms: float  # client CPU per unary call
    echo_rate: float  # calls/s, one at a time
    redis_py_ms: float  # client CPU per EVALSHA "return 1"
    redis_py_wide_ms: float  # client CPU per 60-argument EVALSHA
    redis_script_us: float  # Redis time per "return 1"
    redis_script_wide_us: float  # Redis time per 60-argument call of a script reading its keys


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _echo_server(calls: int) -> None:
    server = grpc.aio.server()

    async def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    handler = grpc.unary_unary_rpc_method_handler(echo)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)  # the client starts timing
    started = _cpu()
    await loop.run_in_executor(None, sys.stdin.readline)  # the client is done
    print(json.dumps({"cpu": _cpu() - started}), flush=True)
    await server.stop(None)


async def _echo_client(port: int, calls: int, server: subprocess.Popen[str]) -> tuple[float, float]:
    assert server.stdin is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(_METHOD, request_serializer=None, response_deserializer=None)
        for _ in range(200):
            await call(b"x" * 100)
        server.stdin.write("\n")
        server.stdin.flush()
        started_cpu, started = _cpu(), time.perf_counter()
        for _ in range(calls):
            await call(b"x" * 100)
        seconds = time.perf_counter() - started
        cpu = _cpu() - started_cpu
    return cpu / calls, calls / seconds


def echo_floor(calls: int) -> tuple[float, float, float]:
    """(server CPU ms, client CPU ms, calls/s) of a bare unary echo, one call at a time."""
    command = [sys.executable, "-m", "bench.floors", "--echo-server", "--calls", str(calls)]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline())
        client_cpu, rate = asyncio.run(_echo_client(port, calls, server))
        server.stdin.write("\n")
        server.stdin.flush()
        server_cpu = json.loads(server.stdout.readline())["cpu"] / calls
    return server_cpu * 1000, client_cpu * 1000, rate


async def _redis_floor(url: str, calls: int) -> tuple[float, float, float, float]:
    client = Redis.from_url(url)
    client.connection_pool.connection_class = PackedConnection  # as the store's
    try:
        tiny = await client.script_load("return 1")
        wide = await client.script_load(
            "for i = 1, #KEYS do redis.call('EXISTS', KEYS[i]) end return 1"
        )
        wide_args = [len(_KEYS), *_KEYS, *[str(i) for i in range(20)]]
        figures: list[float] = []
        for sha, args in ((tiny, [0]), (wide, wide_args)):
            for _ in range(200):
                await client.evalsha(sha, *args)
            await client.config_resetstat()
            started = _cpu()
            for _ in range(calls):
                await client.evalsha(sha, *args)
            figures.append((_cpu() - started) / calls * 1000)
            stats: dict[str, Any] = await client.info("commandstats")
            figures.append(float(stats["cmdstat_evalsha"]["usec_per_call"]))
        return figures[0], figures[2], figures[1], figures[3]
    finally:
        await client.aclose()


def measure(calls: int) -> Floors:
    server_ms, client_ms, rate = echo_floor(calls)
    with tempfile.TemporaryDirectory(prefix="jobgate-floors-") as workdir:
        redis = RedisServer(Path(workdir))
        redis.start()
        try:
            tiny_ms, wide_ms, tiny_us, wide_us = asyncio.run(_redis_floor(redis.url, calls))
        finally:
            redis.stop()
    return Floors(server_ms, client_ms, rate, tiny_ms, wide_ms, tiny_us, wide_us)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        asyncio.run(_echo_server(args.calls))
        return
    print(measure(args.calls))


if __name__ == "__main__":
    main()
