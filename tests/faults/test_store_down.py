"""Redis stopped: UNAVAILABLE, never a hang; NOT_SERVING; recovery on its own.

(DESIGN: Store failure.) How soon each call fails is timed and handed to
`timings`: the bench holds it to its bound (bench/timing.py), the tests only
to the answer.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from tests.e2e.api import COMPLETED, Api, Failure, failure_of, fresh_name
from tests.e2e.harness import Deployment, health_status
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.timings import Timings

#: Long past any fail-fast: a call still unanswered by then hangs. How fast it
#: fails is a figure (bench/timing.py "store down: call fails"), not asserted.
HANG = 20.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def timed_failure(call: Awaitable[Any]) -> tuple[Failure, float]:
    started = time.monotonic()
    failure = await asyncio.wait_for(failure_of(call), HANG)
    return failure, time.monotonic() - started


def assert_store_unavailable(
    failure: Failure, elapsed: float, what: str, timings: Timings, fault: str
) -> None:
    assert failure.code == grpc.StatusCode.UNAVAILABLE, f"{what}: {failure}"
    assert failure.reason == "STORE_UNAVAILABLE", f"{what}: {failure}"
    timings("store down: call fails", elapsed, f"servers, {fault}, {what}")


async def all_health(deployment: Deployment, status: int) -> bool:
    for target in (*deployment.job_targets, *deployment.worker_targets):
        seen = await asyncio.to_thread(health_status, target)
        assert seen == status, f"{target} health is {seen}, waiting for {status}"
    return True


async def test_submit_get_and_claim_fail_with_store_unavailable(
    own_api: Api, own_redis: RedisServer, timings: Timings
) -> None:
    model = fresh_name("m")
    job = await own_api.submit(model)
    own_redis.stop()

    for what, call in (
        ("Submit", own_api.submit(model)),
        ("Get", own_api.get(job.id)),
        ("ClaimNext", own_api.claim([model], wait=5.0)),
        ("Cancel", own_api.cancel(job.id)),
    ):
        failure, elapsed = await timed_failure(call)
        assert_store_unavailable(failure, elapsed, what, timings, "stopped")


async def test_store_unavailable_carries_retry_info(own_api: Api, own_redis: RedisServer) -> None:
    own_redis.stop()

    failure = await failure_of(own_api.submit(fresh_name("m")))

    assert failure.retry_delay is not None and failure.retry_delay > 0, failure


async def test_a_waiting_claim_fails_instead_of_answering_empty(
    own_api: Api, own_redis: RedisServer, timings: Timings
) -> None:
    waiting = asyncio.create_task(own_api.claim([fresh_name("m")], wait=8.0))
    done, _ = await asyncio.wait({waiting}, timeout=0.3)
    assert not done

    own_redis.stop()
    failure, elapsed = await timed_failure(waiting)

    assert_store_unavailable(failure, elapsed, "waiting ClaimNext", timings, "stopped")


async def test_health_goes_not_serving_while_redis_is_down(
    on_own_redis: Deployment, own_redis: RedisServer
) -> None:
    own_redis.stop()

    await assert_eventually(lambda: all_health(on_own_redis, NOT_SERVING), timeout=5.0)


async def test_servers_recover_on_their_own_when_redis_returns(
    own_api: Api, on_own_redis: Deployment, own_redis: RedisServer
) -> None:
    model = fresh_name("m")
    job = await own_api.submit(model, b"kept")
    own_redis.stop()
    await failure_of(own_api.get(job.id))

    own_redis.start()

    await assert_eventually(lambda: all_health(on_own_redis, SERVING), timeout=10.0)
    assert (await own_api.get(job.id)).id == job.id
    claimed = await own_api.claim_one(model)
    assert claimed.payload == b"kept"
    assert (await own_api.complete(job.id, claimed.lease_id)).status == COMPLETED
    assert (await own_api.submit(model)).id


async def test_calls_fail_when_redis_is_killed(
    own_api: Api, own_redis: RedisServer, timings: Timings
) -> None:
    model = fresh_name("m")
    job = await own_api.submit(model)

    own_redis.kill()

    for what, call in (
        ("Submit", own_api.submit(model)),
        ("Get", own_api.get(job.id)),
        ("ClaimNext", own_api.claim([model], wait=5.0)),
    ):
        failure, elapsed = await timed_failure(call)
        assert_store_unavailable(failure, elapsed, what, timings, "killed")


async def test_calls_fail_instead_of_hanging_when_redis_freezes(
    own_api: Api, own_redis: RedisServer, timings: Timings
) -> None:
    model = fresh_name("m")
    job = await own_api.submit(model)
    assert own_redis.process is not None

    # SIGSTOP: the socket stays open but nothing answers, as in a network partition.
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        for what, call in (
            ("Submit", own_api.submit(model)),
            ("Get", own_api.get(job.id)),
            ("ClaimNext", own_api.claim([model], wait=5.0)),
        ):
            failure, elapsed = await timed_failure(call)
            assert_store_unavailable(failure, elapsed, what, timings, "frozen")
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
