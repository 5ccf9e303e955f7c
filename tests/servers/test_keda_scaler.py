"""KEDA's external scaler on the JobService port: the metric, activity, pushes, refusals."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import pytest

from gateway_server.demand import DemandWatches
from gateway_server.scaler import ExternalScaler
from jobgate.keda import externalscaler_pb2 as keda
from jobgate.keda import externalscaler_pb2_grpc
from serving.auth import Authenticator
from serving.shared import Serving
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, fails
from tests.servers.test_auth import write_auth_file

if TYPE_CHECKING:
    Stub = externalscaler_pb2_grpc.ExternalScalerAsyncStub


def scaler(harness: Harness) -> Stub:
    return externalscaler_pb2_grpc.ExternalScalerStub(harness.job_channel)


def ref(**metadata: str) -> keda.ScaledObjectRef:
    return keda.ScaledObjectRef(name="workers", namespace="gpu", scalerMetadata=metadata)


TRIGGER = {"scalerAddress": "jobgate-gateway:50051", "model": "m"}


async def is_active(harness: Harness, **metadata: str) -> bool:
    response = await scaler(harness).IsActive(ref(**(metadata or TRIGGER)), timeout=5)
    return bool(response.result)


async def metric(harness: Harness, **metadata: str) -> keda.MetricValue:
    request = keda.GetMetricsRequest(
        scaledObjectRef=ref(**(metadata or TRIGGER)), metricName="jobgate-m-any"
    )
    [value] = (await scaler(harness).GetMetrics(request, timeout=5)).metricValues
    return value


@pytest.fixture
async def watched(make_harness: MakeHarness) -> tuple[Harness, DemandWatches]:
    built: list[ExternalScaler] = []

    def build(serving: Serving) -> ExternalScaler:
        built.append(ExternalScaler(serving))
        return built[0]

    harness = await make_harness(scaler=build)
    return harness, built[0].watches


# -- the metric and activity ----------------------------------------------------------


async def test_an_idle_model_is_not_active(harness: Harness) -> None:
    assert not await is_active(harness)


async def test_a_queued_job_makes_its_model_active(harness: Harness) -> None:
    await harness.submit("m")
    assert await is_active(harness)
    assert not await is_active(harness, model="other")


async def test_a_running_job_keeps_its_model_active(harness: Harness) -> None:
    await harness.submit("m")
    await harness.claim()
    assert await is_active(harness)  # scaling to zero must not stop it


async def test_the_metric_counts_queued_and_running_jobs(harness: Harness) -> None:
    for _ in range(3):
        await harness.submit("m")
    await harness.claim()
    value = await metric(harness)
    assert (value.metricName, value.metricValue, value.metricValueFloat) == (
        "jobgate-m-any",
        3,
        3.0,
    )


async def test_the_metric_drops_to_zero_when_the_jobs_end(harness: Harness) -> None:
    await harness.submit("m")
    [claimed] = await harness.claim()
    await harness.complete(claimed)
    assert (await metric(harness)).metricValue == 0
    assert not await is_active(harness)


async def test_the_metric_spec_names_the_model_and_pool_with_the_target(
    harness: Harness,
) -> None:
    request = ref(model="llm-7b", pool="gpu-a", targetJobsPerWorker="4")
    [spec] = (await scaler(harness).GetMetricSpec(request, timeout=5)).metricSpecs
    assert (spec.metricName, spec.targetSize, spec.targetSizeFloat) == (
        "jobgate-llm-7b-gpu-a",
        4,
        4.0,
    )


async def test_the_metric_spec_defaults_to_one_job_per_worker_in_any_pool(
    harness: Harness,
) -> None:
    [spec] = (await scaler(harness).GetMetricSpec(ref(**TRIGGER), timeout=5)).metricSpecs
    assert (spec.metricName, spec.targetSize) == ("jobgate-m-any", 1)


async def test_an_empty_pool_means_any_pool(harness: Harness) -> None:
    [spec] = (await scaler(harness).GetMetricSpec(ref(model="m", pool=""), timeout=5)).metricSpecs
    assert spec.metricName == "jobgate-m-any"


async def test_get_metrics_answers_under_the_name_it_was_asked_for(harness: Harness) -> None:
    request = keda.GetMetricsRequest(scaledObjectRef=ref(**TRIGGER), metricName="what-keda-sent")
    [value] = (await scaler(harness).GetMetrics(request, timeout=5)).metricValues
    assert value.metricName == "what-keda-sent"


async def test_the_scaler_needs_no_credentials_with_an_auth_file(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    harness = await make_harness(auth=Authenticator.from_file(write_auth_file(tmp_path / "a")))
    assert not await is_active(harness)
    assert (await metric(harness)).metricValue == 0


# -- refusals ---------------------------------------------------------------------------

BAD_METADATA = [
    ({"scalerAddress": "x:1"}, "scalerMetadata.model"),
    ({"model": "Not A Model"}, "scalerMetadata.model"),
    ({"model": "m", "pool": "no spaces"}, "scalerMetadata.pool"),
    ({"model": "m", "targetJobsPerWorker": "0"}, "scalerMetadata.targetJobsPerWorker"),
    ({"model": "m", "targetJobsPerWorker": "-1"}, "scalerMetadata.targetJobsPerWorker"),
    ({"model": "m", "targetJobsPerWorker": "1.5"}, "scalerMetadata.targetJobsPerWorker"),
    ({"model": "m", "targetJobsPerWorker": "lots"}, "scalerMetadata.targetJobsPerWorker"),
    ({"model": "m", "targetJobsPerWorker": "99999999999"}, "scalerMetadata.targetJobsPerWorker"),
]


@pytest.mark.parametrize(("metadata", "field"), BAD_METADATA, ids=[f for _, f in BAD_METADATA])
@pytest.mark.parametrize("method", ["IsActive", "GetMetricSpec", "StreamIsActive"])
async def test_bad_metadata_is_invalid_argument_naming_the_key(
    harness: Harness, method: str, metadata: dict[str, str], field: str
) -> None:
    call: Any = getattr(scaler(harness), method)(ref(**metadata), timeout=5)
    if method == "StreamIsActive":
        call = call.read()
    failure = await fails(call)
    assert (failure.code, failure.violations) == (grpc.StatusCode.INVALID_ARGUMENT, [field])


async def test_get_metrics_names_the_key_inside_the_scaled_object_ref(harness: Harness) -> None:
    request = keda.GetMetricsRequest(scaledObjectRef=ref(pool="gpu"), metricName="x")
    failure = await fails(scaler(harness).GetMetrics(request, timeout=5))
    assert failure.violations == ["scaledObjectRef.scalerMetadata.model"]


async def test_a_huge_bad_value_is_quoted_short(harness: Harness) -> None:
    request = ref(model="m", targetJobsPerWorker="9" * 100_000)
    failure = await fails(scaler(harness).IsActive(request, timeout=5))
    assert len(failure.message.encode()) < 1024


# -- StreamIsActive ---------------------------------------------------------------------


async def read_state(stream: Any) -> bool:
    message = await stream.read()
    assert isinstance(message, keda.IsActiveResponse), message
    return bool(message.result)


async def test_a_stream_sends_the_current_state_at_once(harness: Harness) -> None:
    await harness.submit("m")
    stream = scaler(harness).StreamIsActive(ref(**TRIGGER), timeout=10)
    assert await read_state(stream) is True
    stream.cancel()


async def test_a_stream_says_active_after_the_first_submit_and_idle_after_the_last_job(
    harness: Harness,
) -> None:
    stream = scaler(harness).StreamIsActive(ref(**TRIGGER), timeout=30)
    assert await read_state(stream) is False
    await harness.submit("m")
    assert await read_state(stream) is True
    [claimed] = await harness.claim()
    await harness.complete(claimed)
    assert await read_state(stream) is False
    stream.cancel()


async def test_streams_of_one_trigger_share_one_watcher(
    watched: tuple[Harness, DemandWatches],
) -> None:
    harness, watches = watched
    streams = [scaler(harness).StreamIsActive(ref(**TRIGGER), timeout=30) for _ in range(5)]
    other = scaler(harness).StreamIsActive(ref(model="m", pool="gpu-a"), timeout=30)
    for stream in [*streams, other]:
        assert await read_state(stream) is False
    assert len(watches) == 2
    for stream in [*streams, other]:
        stream.cancel()


async def test_a_watcher_ends_with_its_last_stream(watched: tuple[Harness, DemandWatches]) -> None:
    harness, watches = watched
    stream = scaler(harness).StreamIsActive(ref(**TRIGGER), timeout=30)
    assert await read_state(stream) is False
    stream.cancel()

    async def gone() -> bool:
        return len(watches) == 0

    await assert_eventually(gone, message="the watcher outlived its streams")


async def test_a_stream_ends_cleanly_when_the_gateway_drains(harness: Harness) -> None:
    stream = scaler(harness).StreamIsActive(ref(**TRIGGER), timeout=30)
    assert await read_state(stream) is False
    harness.serving.lifecycle.start_drain()
    assert await stream.read() is grpc.aio.EOF  # type: ignore[attr-defined]
    assert await stream.code() is grpc.StatusCode.OK


async def test_a_store_failure_ends_the_stream_unavailable(harness: Harness) -> None:
    stream = scaler(harness).StreamIsActive(ref(**TRIGGER), timeout=30)
    assert await read_state(stream) is False
    await harness.serving.store.close()
    assert (await fails(stream.read())).code is grpc.StatusCode.UNAVAILABLE


async def test_scaler_calls_are_counted_like_every_rpc(harness: Harness) -> None:
    await is_active(harness)
    labels = {
        "grpc_type": "unary",
        "grpc_service": "externalscaler.ExternalScaler",
        "grpc_method": "IsActive",
        "grpc_code": "OK",
    }
    assert await harness.value("grpc_server_handled_total", labels) == 1
