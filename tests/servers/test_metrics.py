"""Known traffic gives known counter, gauge and histogram values under DESIGN's names."""

from __future__ import annotations

import asyncio
import contextlib
import io
import urllib.request
from datetime import timedelta

import grpc

from jobgate.cli._servers import process as server_process
from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc, worker_service_pb2
from serving.interceptor import ServingInterceptor
from serving.lifecycle import Lifecycle
from serving.metrics import Metrics
from serving.recovery import Recovery
from serving.settings import Address, ServerSettings
from serving.violations import FieldViolation, ValidationError
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, fails

TENANT = (("x-jobgate-tenant", "t1"),)
INTERACTIVE = job_pb2.PRIORITY_INTERACTIVE
SPEC_G = job_pb2.JobSpec(model="g")


async def _fail(harness: Harness, claimed: worker_service_pb2.ClaimedJob) -> None:
    request = worker_service_pb2.SetResultRequest(
        job_id=claimed.job.id, lease_id=claimed.lease_id, status=job_pb2.JOB_STATUS_FAILED
    )
    await harness.worker.SetResult(request)


async def test_job_counters_gauges_and_histograms(harness: Harness) -> None:
    a_jobs = [await harness.submit("a", TENANT, priority=INTERACTIVE) for _ in range(4)]
    await harness.submit("b", TENANT)
    first, second = await harness.claim(["a"], max_jobs=2)
    await harness.complete(first)
    await _fail(harness, second)
    await harness.claim(["a"])  # one in flight, one left queued
    await harness.job.Cancel(job_service_pb2.CancelRequest(job_id=a_jobs[3].id), metadata=TENANT)

    async def value(name: str, **labels: str) -> float | None:
        return await harness.value(name, labels)

    submitted = "jobgate_jobs_submitted_total"
    assert await value(submitted, tenant="t1", model="a", priority="interactive") == 4
    assert await value(submitted, tenant="t1", model="b", priority="batch") == 1
    finished = "jobgate_jobs_finished_total"
    for status in ("completed", "failed", "cancelled"):
        assert await value(finished, model="a", priority="interactive", status=status) == 1
    assert await value("jobgate_queue_depth", model="a", priority="interactive") in (0, None)
    assert await value("jobgate_queue_depth", model="b", priority="batch") == 1
    assert await value("jobgate_jobs_in_flight", model="a") == 1
    wait = "jobgate_queue_wait_seconds_count"
    assert await value(wait, model="a", priority="interactive") == 3
    duration = "jobgate_job_duration_seconds_count"
    assert await value(duration, model="a", status="completed") == 1
    assert await value(duration, model="a", status="failed") == 1


async def test_a_set_result_resent_after_a_lost_answer_is_counted_once(harness: Harness) -> None:
    await harness.submit("a", TENANT)
    (claimed,) = await harness.claim(["a"])
    await harness.complete(claimed)
    await harness.complete(claimed)  # the worker never saw the first answer
    labels = {"model": "a", "priority": "batch", "status": "completed"}
    assert await harness.value("jobgate_jobs_finished_total", labels) == 1
    duration = {"model": "a", "status": "completed"}
    assert await harness.value("jobgate_job_duration_seconds_count", duration) == 1


async def test_reused_submit_is_not_counted_again(harness: Harness) -> None:
    await harness.submit("a", TENANT, idempotency_key="k")
    await harness.submit("a", TENANT, idempotency_key="k")
    labels = {"tenant": "t1", "model": "a", "priority": "batch"}
    assert await harness.value("jobgate_jobs_submitted_total", labels) == 1


async def test_group_counts_its_children(harness: Harness) -> None:
    children = [job_pb2.JobSpec(model="x"), job_pb2.JobSpec(model="y"), job_pb2.JobSpec(model="y")]
    request = job_service_pb2.SubmitRequest(
        group=job_pb2.GroupSpec(children=children, max_parallel=1)
    )
    group = (await harness.job.Submit(request, metadata=TENANT)).job
    await harness.job.Cancel(job_service_pb2.CancelRequest(job_id=group.id), metadata=TENANT)
    submitted = "jobgate_jobs_submitted_total"
    assert await harness.value(submitted, {"tenant": "t1", "model": "y", "priority": "batch"}) == 2
    finished = "jobgate_jobs_finished_total"
    labels = {"model": "y", "priority": "batch", "status": "cancelled"}
    assert await harness.value(finished, labels) == 2
    assert await harness.value(finished, {**labels, "model": ""}) is None


async def test_grpc_server_metrics_count_calls_by_code(harness: Harness) -> None:
    await harness.submit()
    await fails(harness.submit(model="BAD"))
    submit = {"grpc_type": "unary", "grpc_service": "jobgate.v1.JobService"}
    submit["grpc_method"] = "Submit"
    assert await harness.value("grpc_server_started_total", submit) == 2
    assert await harness.value("grpc_server_handled_total", {**submit, "grpc_code": "OK"}) == 1
    invalid = {**submit, "grpc_code": "INVALID_ARGUMENT"}
    assert await harness.value("grpc_server_handled_total", invalid) == 1
    assert await harness.value("grpc_server_handling_seconds_count", submit) == 2


async def test_metrics_are_served_over_http_on_an_ephemeral_port() -> None:
    loopback = Address("127.0.0.1", 0)
    settings = ServerSettings(listen=loopback, worker_listen=loopback, metrics_listen=loopback)
    process = server_process("serve", settings, out=io.StringIO(), install_signals=False)
    running = asyncio.create_task(process.run())
    await asyncio.wait_for(process.started.wait(), 5)
    try:
        job_address = next(item.address for item in process.listeners if item.name == "job")
        async with grpc.aio.insecure_channel(str(job_address)) as channel:
            stub = job_service_pb2_grpc.JobServiceStub(channel)
            spec = job_pb2.JobSpec(model="http")
            await stub.Submit(job_service_pb2.SubmitRequest(job=spec), timeout=5)
        assert process.metrics_address is not None and process.metrics_address.port != 0
        url = f"http://{process.metrics_address}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
    finally:
        process.request_stop()
        assert await asyncio.wait_for(running, 15) == 0
    text = body.decode()
    assert 'jobgate_queue_depth{model="http",priority="batch"} 1.0' in text
    assert "jobgate_store_up 1.0" in text


async def test_a_group_ended_by_recovery_counts_its_child_not_its_parent(
    make_harness: MakeHarness,
) -> None:
    short = ServerSettings(lease_timeout=timedelta(milliseconds=100), max_attempts=1)
    harness = await make_harness(settings=short)
    request = job_service_pb2.SubmitRequest(group=job_pb2.GroupSpec(children=[SPEC_G]))
    group = (await harness.job.Submit(request, metadata=TENANT)).job
    await harness.claim(["g"])
    recovery = Recovery(harness.serving.store, harness.metrics)

    async def group_failed() -> bool:
        await recovery.step()
        got = await harness.job.Get(job_service_pb2.GetRequest(job_id=group.id), metadata=TENANT)
        return got.job.status == job_pb2.JOB_STATUS_FAILED

    await assert_eventually(group_failed, timeout=5)
    labels = {"model": "g", "priority": "batch", "status": "failed"}
    assert await harness.value("jobgate_jobs_finished_total", labels) == 1
    assert await harness.value("jobgate_leases_expired_total", {"model": "g"}) == 1


async def test_a_refused_call_is_counted_before_its_status_leaves() -> None:
    metrics = Metrics()
    interceptor = ServingInterceptor(Lifecycle(), metrics)
    labels = {"grpc_type": "unary", "grpc_service": "jobgate.v1.JobService"}
    labels |= {"grpc_method": "Submit", "grpc_code": "INVALID_ARGUMENT"}
    counted_when_sent: list[float | None] = []

    class Context:  # what the interceptor uses of a grpc.aio context
        async def abort_with_status(self, status: grpc.Status) -> None:
            value = metrics.registry.get_sample_value("grpc_server_handled_total", labels)
            counted_when_sent.append(value)
            raise grpc.aio.AbortError()

    async def refuse(request: object, context: object) -> None:
        raise ValidationError([FieldViolation("job.model", "is not a model name")])

    unary = interceptor._wrap_unary("/jobgate.v1.JobService/Submit", refuse)
    with contextlib.suppress(grpc.aio.AbortError):
        await unary(object(), Context())

    assert counted_when_sent == [1.0]
    assert metrics.registry.get_sample_value("grpc_server_handled_total", labels) == 1.0
