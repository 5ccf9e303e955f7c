"""SIGTERM drains (DESIGN: Shutdown): in-flight calls finish, streams end, exit 0.

How long after SIGTERM a process exits is timed and handed to `timings`; the
bench holds it to the grace period (bench/timing.py), the tests to the exit
code and the calls' ends.

Deployments here run --grace-period 2. A waiting ClaimNext may be answered
early (empty) when the drain starts: the call finishes, it is not cut. That
also means the drain window is too short to observe from outside, so "new
calls during the drain get SHUTTING_DOWN" is left to in-process server tests.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc

from tests.e2e.api import Api, fresh_name, parse_failure
from tests.e2e.harness import Deployment, ServerProcess
from tests.e2e.test_stream import EOF
from tests.timings import Timings

GRACE = 2.0
#: Long past any drain: a process or call still going by then hangs.
HANG = 20.0


def only(deployment: Deployment, name: str) -> ServerProcess:
    return next(p for p in deployment.processes if p.name == name)


async def exit_code_within(process: ServerProcess, timeout: float) -> tuple[int | None, float]:
    started = time.monotonic()
    code = await asyncio.to_thread(process.wait_exit, timeout)
    return code, time.monotonic() - started


async def test_sigterm_lets_an_in_flight_claim_finish_and_exits_zero(
    shared_api: Api, on_shared_redis: Deployment, timings: Timings
) -> None:
    waiting = asyncio.create_task(shared_api.claim([fresh_name("m")], wait=1.0))
    done, _ = await asyncio.wait({waiting}, timeout=0.3)
    assert not done
    worker_server = only(on_shared_redis, "worker-server-0")

    worker_server.send_sigterm()

    assert await asyncio.wait_for(waiting, timeout=HANG) == []
    code, elapsed = await exit_code_within(worker_server, HANG)
    assert code == 0
    timings(
        "drain: exit past the grace period", elapsed - GRACE, "worker-server, a claim in flight"
    )


async def test_sigterm_ends_an_open_stream_cleanly_and_exits_zero(
    shared_api: Api, on_shared_redis: Deployment
) -> None:
    job = await shared_api.submit(fresh_name("m"))
    call: Any = shared_api.stream(job.id)
    await call.read()
    gateway = only(on_shared_redis, "gateway-0")

    gateway.send_sigterm()

    try:
        while await asyncio.wait_for(call.read(), timeout=HANG) is not EOF:
            pass
        ended = "OK"
    except grpc.aio.AioRpcError as error:
        failure = parse_failure(error)
        assert failure.code == grpc.StatusCode.UNAVAILABLE, failure
        assert failure.reason == "SHUTTING_DOWN", f"stream cut, not ended: {failure}"
        ended = failure.reason
    code, _ = await exit_code_within(gateway, HANG)
    assert code == 0, f"gateway exit code {code} (stream ended: {ended})"


async def test_sigterm_drains_jobgate_serve_and_exits_zero(
    embedded_api: Api, embedded_alone: Deployment, timings: Timings
) -> None:
    waiting = asyncio.create_task(embedded_api.claim([fresh_name("m")], wait=1.0))
    done, _ = await asyncio.wait({waiting}, timeout=0.3)
    assert not done
    serve = only(embedded_alone, "serve")

    serve.send_sigterm()

    assert await asyncio.wait_for(waiting, timeout=HANG) == []
    code, elapsed = await exit_code_within(serve, HANG)
    assert code == 0
    timings("drain: exit past the grace period", elapsed - GRACE, "serve, a claim in flight")
