"""Lost script replies: the connection to Redis breaks after a script ran and before
its reply came back, over and over, while jobs flow (DESIGN: exactly once per call).

The daemons speak the fast path (ReportAndClaim) here as in every scenario; this one
also proves it from the worker-server's metrics, so a daemon that fell back to
ClaimNext and SetResult cannot pass unnoticed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from tests.faults.conftest import RedisFactory, RigFactory, Scale
from tests.faults.ledger import EXTRA_CHECKS
from tests.faults.reply_proxy import ReplyDroppingProxy
from tests.faults.rig import Figures, Load, assert_clean, figures_of, payload
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

TENANT = "acme"


@pytest.fixture
def redis_server(make_redis: RedisFactory) -> RedisServer:
    return make_redis("--appendonly", "yes")


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[ReplyDroppingProxy]:
    proxy = ReplyDroppingProxy(redis_server.port)
    proxy.start()
    yield proxy
    proxy.close()


async def test_lost_script_replies_mid_operation(
    make_rig: RigFactory,
    redis_server: RedisServer,
    proxy: ReplyDroppingProxy,
    scale: Scale,
    figures: Callable[[Figures], None],
) -> None:
    rig = make_rig(redis_server, redis_url=proxy.url)
    for _ in range(2):
        rig.start_worker(concurrency=4)
    async with Load(rig, TENANT, payload(0.05), parallel=4) as load:
        await asyncio.sleep(0.5)
        proxy.every = 20
        await asyncio.sleep(scale(8, 120))
        proxy.every = 0
    ledger = await rig.collect({TENANT: load.ids}, timeout=scale(60, 600))
    fast_path = rig.worker_calls("ReportAndClaim")

    assert proxy.dropped > 0
    assert_clean(ledger, extra=EXTRA_CHECKS)
    # The daemons' results, heartbeats and claims rode ReportAndClaim while the
    # replies were lost; a daemon calls ClaimNext only once it has left the fast path.
    assert fast_path.get("OK", 0) > 0
    assert rig.worker_calls("ClaimNext") == {}
    figures(
        figures_of(
            "lost script replies",
            ledger,
            proxy.dropped,
            report_and_claim_calls=sum(fast_path.values()),
            set_result_calls=sum(rig.worker_calls("SetResult").values()),
        )
    )
