"""Kill -9 the primary under a Submit load through real `jobgate gateway` and `worker-server`.

Measures (printed, and recorded in docs/sentinel.md) how long Submit answers
UNAVAILABLE and how many acknowledged jobs the failover lost, for Redis's
default settings and for `min-replicas-to-write 1` on the primary. Asserts
only what is guaranteed: every failed call is UNAVAILABLE, serving resumes
(within RECOVERY_BOUND at the latest, a safety deadline; how soon is handed to
`timings` for the bench's bound), and the worker side claims again. Acknowledged jobs
can be lost in both cases (asynchronous replication; min-replicas-to-write
bounds the lag, it does not wait for the replica), so their count is measured,
not asserted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from tests.e2e.api import Api, fresh_name, tenant_metadata
from tests.e2e.harness import FAST_SETTINGS, Deployment, redis_deployment
from tests.sentinel_servers import SentinelDeployment
from tests.timings import Timings

pytestmark = pytest.mark.redis

MODEL = "failover"
SUBMITTERS = 4
# Acknowledged submits before the kill, so the kill lands under load.
WARM_UP_JOBS = 100
# After the first success, keep the load this long (the new primary takes it).
AFTER_RECOVERY = 1.0
RECOVERY_BOUND = 30.0
MIN_REPLICAS = ("--min-replicas-to-write", "1", "--min-replicas-max-lag", "1")


@dataclass
class Load:
    """What the submitters saw; times are time.monotonic()."""

    acked: list[str] = field(default_factory=list)
    codes: set[grpc.StatusCode] = field(default_factory=set)
    killed_at: float | None = None
    back_at: float | None = None
    warmed_up: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)


async def submitter(api: Api, load: Load) -> None:
    while not load.done.is_set():
        started = time.monotonic()
        try:
            job = await api.submit(MODEL, b"x")
        except grpc.aio.AioRpcError as error:
            load.codes.add(error.code())
            await asyncio.sleep(0.05)  # UNAVAILABLE: back off a little, as a client would
            continue
        load.acked.append(job.id)
        if len(load.acked) >= WARM_UP_JOBS:
            load.warmed_up.set()
        if load.killed_at is not None and started > load.killed_at and load.back_at is None:
            load.back_at = time.monotonic()
            asyncio.get_running_loop().call_later(AFTER_RECOVERY, load.done.set)


@pytest.fixture(params=["default", "min-replicas-to-write-1"])
def failover_deployment(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, SentinelDeployment, Deployment]]:
    only = MIN_REPLICAS if request.param != "default" else ()
    sentinels = SentinelDeployment(tmp_path / "redis", primary_only_args=only).start()
    try:
        servers = redis_deployment(
            tmp_path / "servers", sentinels.url, "failover", FAST_SETTINGS
        ).start()
        try:
            yield str(request.param), sentinels, servers
        finally:
            servers.stop()
    finally:
        sentinels.stop()


async def test_primary_killed_under_load_serving_resumes_and_losses_are_counted(
    failover_deployment: tuple[str, SentinelDeployment, Deployment], timings: Timings
) -> None:
    name, sentinels, servers = failover_deployment
    job_channel = grpc.aio.insecure_channel(servers.job_target)
    worker_channel = grpc.aio.insecure_channel(servers.worker_target)
    api = Api(job_channel, worker_channel, tenant_metadata(fresh_name("t")))
    load = Load()
    try:
        tasks = [asyncio.create_task(submitter(api, load)) for _ in range(SUBMITTERS)]
        await asyncio.wait_for(load.warmed_up.wait(), RECOVERY_BOUND)
        await asyncio.to_thread(sentinels.primary.kill)
        load.killed_at = time.monotonic()
        acked_at_kill = len(load.acked)
        await asyncio.wait_for(load.done.wait(), RECOVERY_BOUND + AFTER_RECOVERY)
        await asyncio.gather(*tasks)
        assert load.back_at is not None
        downtime = load.back_at - load.killed_at

        lost = [job_id for job_id in load.acked if not await exists(api, job_id)]
        # The worker side follows too: a claim on the new primary gets a job.
        claimed = await api.claim([MODEL], wait=5.0)
        print(
            f"\nFAILOVER {name}: Submit UNAVAILABLE for {downtime:.2f} s; "
            f"{len(load.acked)} acknowledged ({acked_at_kill} before the kill), "
            f"{len(lost)} lost: {lost[:5]}"
        )
        # The one replica is the only candidate: anything else means a
        # foreign Redis joined the deployment and the figures mean nothing.
        assert sentinels.replica is not None
        assert sentinels.current_primary_port() == sentinels.replica.port
        assert load.codes <= {grpc.StatusCode.UNAVAILABLE}, load.codes
        assert len(claimed) == 1
        timings("failover: Submit serving again", downtime, f"Sentinel primary kill -9, {name}")
    finally:
        load.done.set()
        await job_channel.close(None)
        await worker_channel.close(None)


async def exists(api: Api, job_id: str) -> bool:
    try:
        await api.get(job_id)
    except grpc.aio.AioRpcError as error:
        if error.code() is grpc.StatusCode.NOT_FOUND:
            return False
        raise
    return True
