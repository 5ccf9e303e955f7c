"""StreamIsActive on Redis is driven by the store's notifications, never by its re-check."""

from __future__ import annotations

from typing import Any

import pytest

from gateway_server.demand import DemandWatches
from gateway_server.scaler import ExternalScaler
from jobgate.keda import externalscaler_pb2 as keda
from jobgate.keda import externalscaler_pb2_grpc
from serving.settings import ServerSettings
from serving.shared import Serving
from store.redis import RedisStore
from tests.redis_server import RedisServer
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness

pytestmark = pytest.mark.redis

# Past every test's deadline: a state change can only come from a notification.
NO_RECHECK = 600.0


@pytest.fixture(params=[1, 3], ids=["one-partition", "three-partitions"])
async def harness(
    make_harness: MakeHarness, redis_server: RedisServer, partition: str, request: Any
) -> Harness:
    store = RedisStore(
        redis_server.url, ServerSettings().store_settings(), partition, request.param
    )

    def build(serving: Serving) -> ExternalScaler:
        return ExternalScaler(serving, DemandWatches(serving.store, recheck=NO_RECHECK))

    return await make_harness(store=store, scaler=build)


async def state(stream: Any) -> bool:
    message = await stream.read()
    assert isinstance(message, keda.IsActiveResponse), message
    return bool(message.result)


async def test_the_first_submit_to_an_idle_model_makes_its_stream_active(
    harness: Harness,
) -> None:
    stub = externalscaler_pb2_grpc.ExternalScalerStub(harness.job_channel)
    stream = stub.StreamIsActive(keda.ScaledObjectRef(scalerMetadata={"model": "m"}), timeout=30)
    assert await state(stream) is False
    await harness.submit("m")
    assert await state(stream) is True
    stream.cancel()


async def test_the_end_of_the_last_running_job_makes_its_stream_idle(harness: Harness) -> None:
    await harness.submit("m")
    [claimed] = await harness.claim()
    stub = externalscaler_pb2_grpc.ExternalScalerStub(harness.job_channel)
    stream = stub.StreamIsActive(keda.ScaledObjectRef(scalerMetadata={"model": "m"}), timeout=30)
    assert await state(stream) is True
    await harness.complete(claimed)  # publishes the job's id only, not its model
    assert await state(stream) is False
    stream.cancel()
