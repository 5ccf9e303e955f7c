"""ListWorkers and ListQueues through the servers: who is connected, what waits."""

from __future__ import annotations

import grpc

from jobgate.v1 import job_pb2, job_service_pb2, worker_service_pb2
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, fails
from tests.servers.test_worker_registry import SightingStore
from worker_server.registry import WorkerRegistry


async def workers(harness: Harness) -> list[job_pb2.Worker]:
    response = await harness.job.ListWorkers(job_service_pb2.ListWorkersRequest(), timeout=5)
    return list(response.workers)


async def queues(harness: Harness) -> list[job_pb2.QueueStats]:
    response = await harness.job.ListQueues(job_service_pb2.ListQueuesRequest(), timeout=5)
    return list(response.queues)


async def listed(harness: Harness, worker_id: str) -> job_pb2.Worker:
    async def found() -> job_pb2.Worker | None:  # None: not yet
        return next((w for w in await workers(harness) if w.worker_id == worker_id), None)

    worker = await assert_eventually(found, message=f"{worker_id} is not listed")
    assert worker is not None
    return worker


async def claim(harness: Harness, worker_id: str, *models: str, pool: str = "") -> list[str]:
    request = worker_service_pb2.ClaimNextRequest(
        worker_id=worker_id, models=list(models or ("m",)), pool=pool, max_jobs=4
    )
    response = await harness.worker.ClaimNext(request, timeout=5)
    return [claimed.job.id for claimed in response.jobs]


async def test_a_claiming_worker_is_listed_with_its_pool_and_models(harness: Harness) -> None:
    await claim(harness, "gpu-host-1", "m", "m2", pool="gpu-a")
    worker = await listed(harness, "gpu-host-1")
    assert (worker.pool, list(worker.models), list(worker.job_ids)) == ("gpu-a", ["m", "m2"], [])


async def test_an_open_mode_worker_naming_no_pool_serves_the_default_pool(
    harness: Harness,
) -> None:
    await claim(harness, "w1")
    assert (await listed(harness, "w1")).pool == "default"


async def test_a_worker_lists_the_jobs_it_holds(harness: Harness) -> None:
    for _ in range(2):
        await harness.submit()
    held = await claim(harness, "w1")
    assert sorted((await listed(harness, "w1")).job_ids) == sorted(held)


async def test_a_heartbeat_notes_the_lease_s_worker(make_harness: MakeHarness) -> None:
    store = SightingStore()
    harness = await make_harness(store=store, registry=WorkerRegistry(store))
    await harness.submit()
    [claimed] = await store.claim("beating", ["m"])  # claimed elsewhere: unknown here
    request = worker_service_pb2.HeartbeatRequest(
        job_id=claimed.job.id, lease_id=claimed.lease_id, progress=0.5
    )
    await harness.worker.Heartbeat(request, timeout=5)

    async def noted() -> bool:
        return ("beating", None) in [(s.worker_id, s.pool) for b in store.batches for s in b]

    await assert_eventually(noted, message="the heartbeat's worker was not written")


async def test_a_set_result_notes_the_lease_s_worker(make_harness: MakeHarness) -> None:
    store = SightingStore()
    harness = await make_harness(store=store, registry=WorkerRegistry(store))
    await harness.submit()
    [claimed] = await store.claim("finishing", ["m"])
    request = worker_service_pb2.SetResultRequest(
        job_id=claimed.job.id, lease_id=claimed.lease_id, status=job_pb2.JOB_STATUS_COMPLETED
    )
    await harness.worker.SetResult(request, timeout=5)

    async def noted() -> bool:
        return "finishing" in [s.worker_id for b in store.batches for s in b]

    await assert_eventually(noted, message="the result's worker was not written")


async def test_a_report_without_models_keeps_the_recorded_models(harness: Harness) -> None:
    await claim(harness, "w1", "m")
    await listed(harness, "w1")
    request = worker_service_pb2.ReportAndClaimRequest(worker_id="w1")
    await harness.worker.ReportAndClaim(request, timeout=5)
    assert list((await listed(harness, "w1")).models) == ["m"]


async def test_list_queues_counts_queued_and_processing_jobs(harness: Harness) -> None:
    for _ in range(3):
        await harness.submit()
    await claim(harness, "w1")
    await harness.submit("other")
    stats = {(q.model, q.priority): q for q in await queues(harness)}
    batch = stats[("m", job_pb2.PRIORITY_BATCH)]
    assert (batch.queued, batch.processing, batch.pool) == (0, 3, "")
    other = stats[("other", job_pb2.PRIORITY_BATCH)]
    assert (other.queued, other.processing) == (1, 0)
    assert other.HasField("oldest_queued_time") and not batch.HasField("oldest_queued_time")


async def test_list_queues_is_empty_once_every_job_ended(harness: Harness) -> None:
    await harness.submit()
    [claimed] = await harness.claim()
    assert (await harness.complete(claimed)).status == job_pb2.JOB_STATUS_COMPLETED
    assert await queues(harness) == []


async def test_a_store_failure_is_unavailable_for_the_operator_methods(harness: Harness) -> None:
    await harness.serving.store.close()
    for call in (
        harness.job.ListWorkers(job_service_pb2.ListWorkersRequest(), timeout=5),
        harness.job.ListQueues(job_service_pb2.ListQueuesRequest(), timeout=5),
    ):
        assert (await fails(call)).code is grpc.StatusCode.UNAVAILABLE
