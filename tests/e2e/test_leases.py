"""Leases: expiry, fencing, heartbeats, repeated SetResult (DESIGN: Claim, Recovery).

The shared deployment runs --lease-timeout 2, and recovery is due within
about a second of a lease's expiry.
"""

from __future__ import annotations

import time

import grpc

from jobgate.v1 import worker_service_pb2
from tests.e2e.api import COMPLETED, FAILED, PROCESSING, QUEUED, Api, failure_of
from tests.e2e.conftest import ApiFactory
from tests.helpers import assert_eventually
from tests.timings import Timings

EXPIRY_WAIT = 10.0
LEASE_TIMEOUT = 2.0
# A healthy worker's heartbeat period in these tests.
HEARTBEAT_INTERVAL = 0.1
# How far past a deadline the server's recovery is given to act on it.
PAST_DEADLINE = 1.0


async def wait_for_status(api: Api, job_id: str, status: int, timeout: float = EXPIRY_WAIT) -> None:
    async def reached() -> bool:
        job = await api.get(job_id)
        assert job.status == status, f"status {job.status}, waiting for {status}"
        return True

    await assert_eventually(reached, timeout=timeout)


async def heartbeat_until_server_time(
    api: Api, job_id: str, lease_id: str, moment_ns: int, timeout: float = 20.0
) -> list[worker_service_pb2.HeartbeatResponse]:
    """Heartbeat like a healthy worker until the server's clock has passed `moment_ns`.

    The server's clock is read from each reply: its lease expiry minus the
    lease timeout. So the test waits for the condition it is about (the
    server's time past a deadline), however slowly a loaded machine runs.
    """
    lease_ns = round(LEASE_TIMEOUT * 1e9)
    beats: list[worker_service_pb2.HeartbeatResponse] = []

    async def passed() -> bool:
        beats.append(await api.heartbeat(job_id, lease_id, 0.5))
        return beats[-1].lease_expire_time.ToNanoseconds() - lease_ns > moment_ns

    await assert_eventually(passed, timeout=timeout, interval=HEARTBEAT_INTERVAL)
    return beats


async def expired_and_reclaimed(
    api: Api, other: Api, model: str
) -> tuple[worker_service_pb2.ClaimedJob, worker_service_pb2.ClaimedJob]:
    """Claim a job with `api`, let the lease lapse, re-claim it with `other`."""
    await api.submit(model)
    old = await api.claim_one(model)
    await wait_for_status(api, old.job.id, QUEUED)
    new = await other.claim_one(model)
    assert new.job.id == old.job.id
    return old, new


async def test_expired_lease_requeues_the_job_at_its_original_place(api: Api, model: str) -> None:
    first = await api.submit(model)
    second = await api.submit(model)
    claimed = await api.claim_one(model)
    assert claimed.job.id == first.id

    await wait_for_status(api, first.id, QUEUED)
    requeued = await api.get(first.id)
    again = await api.claim_one(model)

    assert requeued.attempts == 1
    assert requeued.queue_position == 0
    assert again.job.id == first.id, "the requeued job lost its place to a later one"
    assert again.job.attempts == 2
    assert again.lease_id != claimed.lease_id
    assert (await api.get(second.id)).status == QUEUED


async def test_an_expired_lease_is_recovered_after_the_lease_timeout_not_before(
    api: Api, model: str, timings: Timings
) -> None:
    job = await api.submit(model)
    before_claim = time.monotonic()
    await api.claim_one(model)
    after_claim = time.monotonic()

    await wait_for_status(api, job.id, QUEUED)
    requeued_at = time.monotonic()

    # DESIGN: --lease-timeout 2 here. Not before the lease (a load can only make
    # it later); how soon after, "about a second", is the bench's bound.
    assert requeued_at - before_claim >= LEASE_TIMEOUT - 0.05, "the lease expired early"
    late = requeued_at - after_claim - LEASE_TIMEOUT
    timings("lease recovery: requeued past the lease", late, "e2e, idle")


async def test_heartbeat_with_a_stale_lease_is_lease_lost_and_changes_nothing(
    apis: ApiFactory, api: Api, model: str
) -> None:
    other = apis(api.client_metadata, ())
    old, new = await expired_and_reclaimed(api, other, model)

    failure = await failure_of(api.heartbeat(old.job.id, old.lease_id, 0.9, "stale"))

    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION, failure
    assert failure.reason == "LEASE_LOST"
    job = await api.get(new.job.id)
    assert (job.status, job.worker_id, job.attempts) == (PROCESSING, other.worker_id, 2)
    assert job.progress != 0.9 and job.stage != "stale"


async def test_set_result_with_a_stale_lease_is_lease_lost_and_changes_nothing(
    apis: ApiFactory, api: Api, model: str
) -> None:
    other = apis(api.client_metadata, ())
    old, new = await expired_and_reclaimed(api, other, model)

    failure = await failure_of(api.complete(old.job.id, old.lease_id, b"stale"))

    assert failure.code == grpc.StatusCode.FAILED_PRECONDITION, failure
    assert failure.reason == "LEASE_LOST"
    assert (await api.get(new.job.id)).status == PROCESSING
    done = await other.complete(new.job.id, new.lease_id, b"fresh")
    assert (done.status, done.result) == (COMPLETED, b"fresh")


async def test_heartbeats_keep_a_lease_alive_past_its_timeout(api: Api, model: str) -> None:
    job = await api.submit(model)
    claimed = await api.claim_one(model)
    first_expiry = claimed.lease_expire_time.ToNanoseconds()

    # Heartbeat until the server's clock is well past the first lease's expiry.
    beats = await heartbeat_until_server_time(
        api, job.id, claimed.lease_id, first_expiry + round(PAST_DEADLINE * 1e9)
    )
    expiries = [beat.lease_expire_time.ToNanoseconds() for beat in beats]

    assert (await api.get(job.id)).attempts == 1
    assert expiries == sorted(expiries) and expiries[-1] > expiries[0]
    assert (await api.complete(job.id, claimed.lease_id)).status == COMPLETED


async def test_heartbeat_records_progress_and_stage(api: Api, model: str) -> None:
    job = await api.submit(model)
    claimed = await api.claim_one(model)

    beat = await api.heartbeat(job.id, claimed.lease_id, 0.4, "load")
    recorded = await api.get(job.id)
    await api.heartbeat(job.id, claimed.lease_id, 0.6, "")
    kept = await api.get(job.id)

    assert not beat.cancel_requested
    assert (recorded.progress, recorded.stage) == (0.4, "load")
    assert (kept.progress, kept.stage) == (0.6, "load"), "an empty stage keeps the last one"


async def test_lease_expiry_past_max_attempts_fails_attempts_exhausted(
    api: Api, model: str
) -> None:
    job = await api.submit(model, max_attempts=1)
    await api.claim_one(model)

    await wait_for_status(api, job.id, FAILED)

    failed = await api.get(job.id)
    assert failed.error_code == "ATTEMPTS_EXHAUSTED"
    assert failed.attempts == 1
    assert await api.claim([model]) == []


async def test_set_result_repeated_with_the_same_lease_returns_the_stored_job(
    api: Api, model: str
) -> None:
    job = await api.submit(model)
    claimed = await api.claim_one(model)
    first = await api.complete(job.id, claimed.lease_id, b"answer")

    again = await api.complete(job.id, claimed.lease_id, b"answer")

    assert again == first
    assert await api.get(job.id) == first


async def test_failed_result_repeated_with_the_same_lease_returns_the_stored_job(
    api: Api, model: str
) -> None:
    job = await api.submit(model)
    claimed = await api.claim_one(model)
    first = await api.fail(job.id, claimed.lease_id, code="BOOM")

    again = await api.fail(job.id, claimed.lease_id, code="BOOM")

    assert again == first
    assert first.status == FAILED
