"""Result TTL (DESIGN: TTL), on a deployment with --result-ttl 1.

Waits use a finished job's own expiry as the clock, so no test sleeps.
"""

from __future__ import annotations

import grpc

from jobgate.v1 import job_service_pb2
from tests.e2e.api import Api, failure_of, spec
from tests.helpers import assert_eventually

EXPIRY_WAIT = 8.0


async def wait_until_gone(api: Api, job_id: str) -> None:
    async def gone() -> bool:
        try:
            await api.get(job_id)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND, error
            return True
        raise AssertionError(f"job {job_id} still there")

    await assert_eventually(gone, timeout=EXPIRY_WAIT)


async def finished_job(api: Api, model: str, key: str = "") -> str:
    job = await api.submit(model, key=key)
    claimed = await api.claim_one(model)
    await api.complete(job.id, claimed.lease_id)
    return job.id


async def test_a_finished_job_is_kept_until_its_ttl_then_expires(ttl_api: Api, model: str) -> None:
    job_id = await finished_job(ttl_api, model)
    assert (await ttl_api.get(job_id)).id == job_id

    await wait_until_gone(ttl_api, job_id)

    failure = await failure_of(ttl_api.get(job_id))
    assert failure.reason == "JOB_NOT_FOUND"


async def test_an_expired_jobs_key_can_be_used_again(ttl_api: Api, model: str) -> None:
    old = await finished_job(ttl_api, model, key="nightly")
    await wait_until_gone(ttl_api, old)

    again = await ttl_api.submit_request(
        job_service_pb2.SubmitRequest(idempotency_key="nightly", job=spec(model))
    )

    assert not again.reused
    assert again.job.id != old


async def test_live_jobs_never_expire(ttl_api: Api, model: str) -> None:
    queued = await ttl_api.submit(model)
    processing = await ttl_api.submit("busy-" + model)
    await ttl_api.claim_one("busy-" + model)
    clock = await finished_job(ttl_api, "clock-" + model)

    await wait_until_gone(ttl_api, clock)

    assert (await ttl_api.get(queued.id)).id == queued.id
    assert (await ttl_api.get(processing.id)).id == processing.id


async def test_a_finished_child_lives_as_long_as_its_group(ttl_api: Api, model: str) -> None:
    group = await ttl_api.submit_group([spec(model), spec(model)], max_parallel=1)
    first, second = (child.id for child in group.children)
    claimed = await ttl_api.claim_one(model)
    await ttl_api.complete(claimed.job.id, claimed.lease_id)
    clock = await finished_job(ttl_api, "clock-" + model)

    await wait_until_gone(ttl_api, clock)

    assert (await ttl_api.get(first)).id == first, "a child expired before its group ended"
    claimed = await ttl_api.claim_one(model)
    await ttl_api.complete(claimed.job.id, claimed.lease_id)
    await wait_until_gone(ttl_api, group.id)
    for child in (first, second):
        assert (await failure_of(ttl_api.get(child))).code == grpc.StatusCode.NOT_FOUND
