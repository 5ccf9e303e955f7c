"""ListJobs pages and their walk, RetryJob and its refusals, ListWorkers and ListQueues."""

from __future__ import annotations

import asyncio

import pytest
from google.rpc import code_pb2

from jobgate import (
    FailedPreconditionError,
    InvalidArgumentError,
    JobClient,
    PermissionDeniedError,
    SyncJobClient,
)
from jobgate.errors import JobNotFoundError, JobNotRetryableError, PoolNotAllowedError
from jobgate.v1 import job_pb2, job_service_pb2
from tests.client.fake_job_service import UNAVAILABLE, Fail, FakeJobService, job

Fake = tuple[FakeJobService, str]
FAILED = job_pb2.JOB_STATUS_FAILED
NOT_RETRYABLE = Fail(code_pb2.FAILED_PRECONDITION, "JOB_NOT_RETRYABLE")


def jobs(count: int, status: int = FAILED, model: str = "m") -> list[job_pb2.Job]:
    return [job(f"01J{i:03d}", status, model=model) for i in range(count)]


async def test_a_page_is_its_jobs_and_the_token_of_the_next(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.jobs = jobs(5)

    page, token = await client.list_jobs_page(filter="status = FAILED", page_size=2)

    assert [j.id for j in page] == ["01J000", "01J001"]
    assert token
    [seen] = service.calls("ListJobs")
    assert (seen.request.filter, seen.request.page_size, seen.request.page_token) == (
        "status = FAILED",
        2,
        "",
    )


async def test_the_last_page_has_no_token(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.jobs = jobs(2)

    _, token = await client.list_jobs_page(page_size=2)

    assert token == ""


async def test_list_jobs_walks_every_page_passing_each_token_on(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.jobs = jobs(5)

    pages = [[j.id for j in page] async for page in client.list_jobs(page_size=2)]

    assert pages == [["01J000", "01J001"], ["01J002", "01J003"], ["01J004"]]
    tokens = [seen.request.page_token for seen in service.calls("ListJobs")]
    assert tokens[0] == "" and len(set(tokens)) == 3


async def test_list_jobs_skips_an_empty_page_but_follows_its_token(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    empty = job_service_pb2.ListJobsResponse(next_page_token="more")
    last = job_service_pb2.ListJobsResponse(jobs=[job("01JLAST")])
    service.script("ListJobs", empty, last)

    pages = [page async for page in client.list_jobs(filter="model = m")]

    assert [[j.id for j in page] for page in pages] == [["01JLAST"]]
    second = service.calls("ListJobs")[1].request
    assert (second.page_token, second.filter) == ("more", "model = m")


async def test_list_jobs_retries_an_unavailable_page(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.jobs = jobs(1)
    service.script("ListJobs", UNAVAILABLE)

    pages = [page async for page in client.list_jobs()]

    assert len(pages) == 1 and len(service.calls("ListJobs")) == 2


async def test_a_filter_the_server_cannot_read_raises_naming_filter(
    fake: Fake, client: JobClient
) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        await client.list_jobs_page(filter="colour = red")

    assert [v.field for v in raised.value.field_violations] == ["filter"]


async def test_a_token_of_another_filter_raises_naming_page_token(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.jobs = jobs(3)
    _, token = await client.list_jobs_page(filter="model = m", page_size=1)

    with pytest.raises(InvalidArgumentError) as raised:
        await client.list_jobs_page(filter="status = FAILED", page_token=token)

    assert [v.field for v in raised.value.field_violations] == ["page_token"]


async def test_retry_job_returns_the_job_back_at_work(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.jobs = [job("01JF", FAILED, attempts=3, error_code="HANDLER_ERROR")]

    retried = await client.retry_job("01JF")

    assert (retried.id, retried.status, retried.attempts) == ("01JF", job_pb2.JOB_STATUS_QUEUED, 0)
    assert retried.error_code == ""
    assert service.calls("RetryJob")[0].request.job_id == "01JF"


async def test_retrying_a_completed_job_raises_job_not_retryable(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.jobs = [job("01JC", job_pb2.JOB_STATUS_COMPLETED)]

    with pytest.raises(JobNotRetryableError) as raised:
        await client.retry_job("01JC")

    assert isinstance(raised.value, FailedPreconditionError)
    assert raised.value.reason == "JOB_NOT_RETRYABLE"
    assert raised.value.metadata["job_id"] == "01JC"
    assert not service.calls("Get")  # nothing was unsure: no read-back


async def test_retrying_a_job_whose_pool_is_no_longer_allowed_raises_pool_not_allowed(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.script("RetryJob", Fail(code_pb2.PERMISSION_DENIED, "POOL_NOT_ALLOWED"))

    with pytest.raises(PoolNotAllowedError) as raised:
        await client.retry_job("01JF")

    assert isinstance(raised.value, PermissionDeniedError)


async def test_retrying_an_unknown_job_raises_job_not_found(fake: Fake, client: JobClient) -> None:
    with pytest.raises(JobNotFoundError):
        await client.retry_job("01JNOPE")


async def test_a_retry_refused_after_a_lost_answer_returns_the_job_the_first_try_requeued(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.script("RetryJob", UNAVAILABLE, NOT_RETRYABLE)
    service.script("Get", job_service_pb2.GetResponse(job=job("01JF", job_pb2.JOB_STATUS_QUEUED)))

    retried = await client.retry_job("01JF")

    assert retried.status == job_pb2.JOB_STATUS_QUEUED
    assert len(service.calls("RetryJob")) == 2 and len(service.calls("Get")) == 1


async def test_a_retry_refused_after_a_lost_answer_still_raises_when_the_job_is_terminal(
    fake: Fake, client: JobClient
) -> None:
    service, _ = fake
    service.script("RetryJob", UNAVAILABLE, NOT_RETRYABLE)
    completed = job("01JF", job_pb2.JOB_STATUS_COMPLETED)
    service.script("Get", job_service_pb2.GetResponse(job=completed))

    with pytest.raises(JobNotRetryableError):
        await client.retry_job("01JF")


async def test_list_workers_returns_every_worker(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.workers = [
        job_pb2.Worker(worker_id="gpu-1", pool="onprem", models=["m"], job_ids=["01JA"]),
        job_pb2.Worker(worker_id="gpu-2", pool="cloud"),
    ]

    workers = await client.list_workers()

    assert [(w.worker_id, list(w.job_ids)) for w in workers] == [("gpu-1", ["01JA"]), ("gpu-2", [])]


async def test_list_queues_returns_every_queue(fake: Fake, client: JobClient) -> None:
    service, _ = fake
    service.queues = [job_pb2.QueueStats(model="m", pool="onprem", queued=3, processing=1)]

    [queue] = await client.list_queues()

    assert (queue.model, queue.pool, queue.queued, queue.processing) == ("m", "onprem", 3, 1)


@pytest.mark.parametrize("method", ["list_workers", "list_queues"])
async def test_a_client_role_asking_for_the_fleet_raises_permission_denied(
    fake: Fake, client: JobClient, method: str
) -> None:
    service, _ = fake
    rpc = {"list_workers": "ListWorkers", "list_queues": "ListQueues"}[method]
    service.script(rpc, Fail(code_pb2.PERMISSION_DENIED))

    with pytest.raises(PermissionDeniedError):
        await getattr(client, method)()


async def test_the_sync_client_has_each_new_call(fake: Fake) -> None:
    service, target = fake
    service.jobs = jobs(3)
    service.workers = [job_pb2.Worker(worker_id="gpu-1")]
    service.queues = [job_pb2.QueueStats(model="m")]

    def use_sync_client() -> tuple[list[list[str]], str, str, str, str]:
        # In a thread: the fake server runs on this test's event loop.
        with SyncJobClient(target) as client:
            pages = [[j.id for j in page] for page in client.list_jobs(page_size=2)]
            first, _ = client.list_jobs_page(page_size=1)
            retried = client.retry_job("01J000")
            [worker] = client.list_workers()
            [queue] = client.list_queues()
            return pages, first[0].id, retried.id, worker.worker_id, queue.model

    answers = await asyncio.to_thread(use_sync_client)

    assert answers == ([["01J000", "01J001"], ["01J002"]], "01J000", "01J000", "gpu-1", "m")
