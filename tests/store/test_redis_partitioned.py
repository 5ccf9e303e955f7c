"""RedisStore (--redis-partitions N > 1): what only spreading over partitions has.

The shared semantics run on it through the contract suite ("redis3"); these
tests show where things live (ids, keys, groups), that claims and long polls
span the partitions, that positions and the audit stream add them up, and
what a claim costs. All on the session redis-server, each test on fresh
partition names.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from importlib.resources import files
from typing import Any

import pytest
from redis.asyncio import Redis

from store import InvalidRequest, QuotaExceeded, StoreSettings, StoreUnavailable, open_store
from store.keys import MAX_PARTITIONS, partition_tags
from store.model import GroupSpec, JobSpec, JobStatus, Priority, ResultReport, SubmitRequest
from store.redis import RedisStore, recovery
from store.redis.ids import PartitionIds, partition_of
from store.redis.listing import PartitionLister
from store.redis.partition import Partition
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer
from tests.store.conftest import claim_is_waiting

pytestmark = pytest.mark.redis

TENANT = "acme"
MODEL = "llm-small"
Factory = Callable[..., Awaitable[RedisStore]]


def single(
    tenant: str = TENANT, key: str = "", priority: Priority = Priority.BATCH
) -> SubmitRequest:
    return SubmitRequest(tenant, JobSpec(MODEL, b"input"), priority, idempotency_key=key)


def group(size: int, key: str = "") -> SubmitRequest:
    children = tuple(JobSpec(MODEL, f"child {i}".encode()) for i in range(size))
    return SubmitRequest(TENANT, GroupSpec(children), idempotency_key=key)


def done() -> ResultReport:
    return ResultReport(JobStatus.COMPLETED, b"done")


@pytest.fixture
async def make(redis_server: RedisServer, partition: str) -> AsyncIterator[Factory]:
    """make(partitions, **settings): a store of the test's deployment; the same name each call.

    Fair share is off unless asked for: these tests are about how one FIFO
    order spreads over partitions (unkeyed submits in turn); fair share sends
    every submit of a tenant to its partition (tests/store/test_contract_fair.py).
    """
    opened: list[RedisStore] = []

    async def build(partitions: int = 3, **settings: Any) -> RedisStore:
        settings.setdefault("fair_share", False)
        store = open_store(
            redis_server.url, StoreSettings(**settings), partition=partition, partitions=partitions
        )
        assert isinstance(store, RedisStore)
        await store.open()
        opened.append(store)
        return store

    yield build
    for store in opened:
        await store.close()


# -- where things live -------------------------------------------------------------


def test_one_partition_is_the_plain_store_under_its_old_tag() -> None:
    store = open_store("redis://127.0.0.1:1", StoreSettings(), partition="prod", partitions=1)
    assert type(store) is RedisStore
    assert store.engine.owner.keys.prefix == "jobgate:{prod}:"


def test_several_partitions_are_tagged_name_slash_index() -> None:
    assert partition_tags("prod", 3) == ["prod/0", "prod/1", "prod/2"]
    store = open_store("redis://127.0.0.1:1", StoreSettings(), partition="prod", partitions=3)
    assert isinstance(store, RedisStore)
    assert [part.keys.prefix for part in store.engine.parts] == [
        "jobgate:{prod/0}:",
        "jobgate:{prod/1}:",
        "jobgate:{prod/2}:",
    ]


@pytest.mark.parametrize("count", [0, MAX_PARTITIONS + 1])
def test_a_partition_count_out_of_range_is_refused(count: int) -> None:
    with pytest.raises(ValueError, match=r"partitions must be 1\.\.1024"):
        open_store("redis://127.0.0.1:1", StoreSettings(), partitions=count)


@pytest.mark.parametrize("partitions", [2, 3, 12, 1024])
def test_ids_are_drawn_in_the_partition_asked_for_and_increase(partitions: int) -> None:
    ids = PartitionIds(partitions)
    drawn = [ids.new(i % partitions) for i in range(3 * partitions)]
    assert [partition_of(job_id, partitions) for job_id in drawn] == [
        i % partitions for i in range(3 * partitions)
    ]
    assert drawn == sorted(set(drawn))


async def test_a_job_lives_in_its_ids_partition(make: Factory, raw: Redis) -> None:
    store = await make()
    for _ in range(6):
        job = (await store.submit(single())).job
        home = store.engine.parts[partition_of(job.id, 3)]
        held = [bool(await raw.exists(part.keys.job(job.id))) for part in store.engine.parts]
        assert held == [part is home for part in store.engine.parts]


async def test_unkeyed_submits_take_the_partitions_in_turn(make: Factory) -> None:
    store = await make()
    jobs = [(await store.submit(single())).job for _ in range(6)]
    homes = [partition_of(job.id, 3) for job in jobs]
    assert sorted(homes[:3]) == [0, 1, 2]
    assert homes[3:] == homes[:3]


async def test_a_groups_children_live_in_the_parents_partition(make: Factory) -> None:
    store = await make()
    parent = (await store.submit(group(8))).job
    homes = {partition_of(child.id, 3) for child in parent.children}
    assert homes == {partition_of(parent.id, 3)}


async def test_under_fair_share_every_submit_of_a_tenant_goes_to_its_partition(
    make: Factory,
) -> None:
    store = await make(fair_share=True)
    jobs = [(await store.submit(single())).job for _ in range(5)]
    assert {partition_of(job.id, 3) for job in jobs} == {partition_of(TENANT, 3)}


async def test_keyed_submits_of_a_tenant_go_to_its_partition(make: Factory) -> None:
    store = await make()
    jobs = [(await store.submit(single(key=f"k{i}"))).job for i in range(5)]
    assert {partition_of(job.id, 3) for job in jobs} == {partition_of(TENANT, 3)}


async def test_a_keyed_submit_finds_its_original_through_another_gateway(make: Factory) -> None:
    first, second = await make(), await make()  # two replicas of one deployment
    original = (await first.submit(single(key="once"))).job
    for _ in range(3):  # whatever partition the round-robin would pick next
        again = await second.submit(single(key="once"))
        assert (again.job.id, again.reused) == (original.id, True)


async def test_a_batch_with_a_keyed_item_is_made_in_the_tenants_partition(make: Factory) -> None:
    store = await make()
    made = await store.submit_batch([single(), single(key="k"), group(2)])
    homes = {partition_of(result.job.id, 3) for result in made}
    assert homes == {partition_of(TENANT, 3)}
    again = await store.submit_batch([single(key="k")])
    assert (again[0].job.id, again[0].reused) == (made[1].job.id, True)


async def test_caps_count_the_live_jobs_of_every_partition(make: Factory) -> None:
    store = await make(max_live_per_tenant=4)
    for _ in range(4):  # spread over the three partitions
        await store.submit(single())
    with pytest.raises(QuotaExceeded):
        await store.submit(single())


async def test_submits_read_the_other_partitions_once_per_partition_a_second(
    make: Factory, monkeypatch: Any
) -> None:
    store = await make()
    reads: list[object] = []
    real_read = store.engine.connection.read_pipelined

    async def counted_read(*args: Any) -> list[Any]:
        reads.append(args)
        return await real_read(*args)

    monkeypatch.setattr(store.engine.connection, "read_pipelined", counted_read)
    for _ in range(9):  # three rounds over the three partitions, well within a second
        await store.submit(single())
    assert len(reads) == 3


# -- claims --------------------------------------------------------------------------


async def test_claims_follow_submit_order_across_partitions(make: Factory) -> None:
    store = await make()
    ids = [(await store.submit(single())).job.id for _ in range(9)]
    claimed = [(await store.claim("w1", [MODEL]))[0].job.id for _ in range(9)]
    assert claimed == ids


async def test_a_busy_partition_does_not_starve_the_others(make: Factory) -> None:
    store = await make()
    # one tenant's keyed flood fills its partition first (its sequence runs
    # far ahead), then other partitions get unkeyed jobs
    flood = [(await store.submit(single(key=f"k{i}"))).job.id for i in range(6)]
    later = [(await store.submit(single(tenant="other"))).job.id for _ in range(3)]
    claimed = [(await store.claim("w1", [MODEL]))[0].job.id for _ in range(9)]
    assert claimed == flood + later


async def test_a_higher_priority_in_another_partition_is_claimed_first(make: Factory) -> None:
    store = await make()
    batch = [(await store.submit(single(key=f"b{i}"))).job for i in range(3)]
    elsewhere = store.engine.parts[(partition_of(TENANT, 3) + 1) % 3]
    urgent = (await elsewhere.submit(single(priority=Priority.INTERACTIVE))).job
    claimed = await store.claim("w1", [MODEL], max_jobs=2)
    assert [c.job.id for c in claimed] == [urgent.id, batch[0].id]


async def test_a_claim_takes_jobs_from_several_partitions_at_once(make: Factory) -> None:
    store = await make()
    ids = [(await store.submit(single())).job.id for _ in range(6)]
    claimed = await store.claim("w1", [MODEL], max_jobs=6)
    assert [c.job.id for c in claimed] == ids
    assert {partition_of(c.job.id, 3) for c in claimed} == {0, 1, 2}


@pytest.mark.usefixtures("pushed_wake_ups_only")
@pytest.mark.parametrize("index", [0, 1, 2])
async def test_a_long_poll_wakes_on_a_job_queued_in_any_partition(
    make: Factory, index: int
) -> None:
    store = await make()
    waiting = asyncio.create_task(store.claim("w1", [MODEL], wait=timedelta(seconds=60)))
    await claim_is_waiting(store)
    job = (await store.engine.parts[index].submit(single())).job
    claimed = await asyncio.wait_for(waiting, 30)
    assert [c.job.id for c in claimed] == [job.id]


async def test_results_of_several_partitions_are_answered_in_order(make: Factory) -> None:
    store = await make()
    for _ in range(3):
        await store.submit(single())
    leases = await store.claim("w1", [MODEL], max_jobs=3)
    results = [(c.job.id, c.lease_id, done()) for c in reversed(leases)]
    step = await store.report_and_claim("w1", [MODEL], results, 0)
    assert [answer.job_id for answer in step.results] == [c.job.id for c in reversed(leases)]
    assert all(answer.recorded is not None for answer in step.results)


async def test_an_empty_claim_costs_one_round_trip(make: Factory, monkeypatch: Any) -> None:
    store = await make(partitions=12)
    trips: list[str] = []
    for part in store.engine.parts:
        scripts = part.connection.scripts
        real_run = scripts.run

        async def counted_run(*args: Any, _run: Any = real_run) -> Any:
            trips.append("script")
            return await _run(*args)

        monkeypatch.setattr(scripts, "run", counted_run)
    real_read = store.engine.connection.read_pipelined

    async def counted_read(*args: Any) -> list[Any]:
        trips.append("pipeline")
        return await real_read(*args)

    monkeypatch.setattr(store.engine.connection, "read_pipelined", counted_read)
    assert await store.claim("w1", [MODEL, "other-model"]) == []
    assert trips == ["pipeline"]


# -- position and events ----------------------------------------------------------------


async def test_queue_position_adds_up_every_partitions_queue(make: Factory) -> None:
    store = await make()
    jobs = [(await store.submit(single())).job for _ in range(7)]
    positions = [(await store.get(TENANT, job.id)).queue_position for job in jobs]
    assert positions == list(range(7))


async def test_queue_position_is_claim_order_when_the_partitions_counters_differ(
    make: Factory,
) -> None:
    store = await make()
    flood = [(await store.submit(single(key=f"k{i}"))).job for i in range(5)]  # one partition
    later = [(await store.submit(single(tenant="other"))).job for _ in range(3)]
    jobs = flood + later
    positions = [(await store.get(job.tenant, job.id)).queue_position for job in jobs]
    assert positions == list(range(8))
    claimed = [c.job.id for c in await store.claim("w1", [MODEL], max_jobs=8)]
    assert claimed == [job.id for job in jobs]


async def test_a_submit_answer_counts_every_partitions_queue(make: Factory) -> None:
    store = await make()
    answers = [(await store.submit(single())).job for _ in range(5)]
    assert [job.queue_position for job in answers] == list(range(5))


async def test_a_reused_submit_answers_the_originals_position(make: Factory) -> None:
    store = await make()
    original = (await store.submit(single(key="k"))).job
    for _ in range(3):
        await store.submit(single(tenant="other"))
    again = await store.submit(single(key="k"))
    assert (again.reused, again.job.id, again.job.queue_position) == (True, original.id, 0)


async def test_queue_position_counts_higher_priorities_of_every_partition(make: Factory) -> None:
    store = await make()
    batch = (await store.submit(single())).job
    for _ in range(3):  # one in each partition
        await store.submit(single(priority=Priority.INTERACTIVE))
    assert (await store.get(TENANT, batch.id)).queue_position == 3


def _lagging_ids(store: RedisStore, per_partition: int) -> None:
    """Make `store` (a gateway) submit with ids of an hour ago, handed out
    newest first: smaller than any other gateway's, and decreasing along its
    own submits, as ids from clocks that disagree can be."""
    hour_ago = time.time_ns() - 3600 * 10**9
    with pytest.MonkeyPatch.context() as patch:  # synchronous: nothing else runs meanwhile
        patch.setattr(time, "time_ns", lambda: hour_ago)
        drawn = [[store.engine.ids.new(index) for _ in range(per_partition)] for index in range(3)]
    for part, ids in zip(store.engine.parts, drawn, strict=True):
        part.new_id = ids.pop


async def test_queue_position_is_claim_order_when_ids_do_not_follow_submit_order(
    make: Factory,
) -> None:
    lagging, ahead = await make(), await make()  # two gateways of one deployment
    _lagging_ids(lagging, per_partition=4)
    jobs = []
    for _ in range(6):  # interleaved: each queue's ids go up and down along it
        jobs.append((await ahead.submit(single())).job)
        jobs.append((await lagging.submit(single())).job)
    queues = [[job.id for job in jobs if partition_of(job.id, 3) == i] for i in range(3)]
    assert all(ids != sorted(ids) for ids in queues)
    positions = {job.id: (await ahead.get(TENANT, job.id)).queue_position for job in jobs}
    claimed = [(await ahead.claim("w1", [MODEL]))[0].job.id for _ in jobs]
    assert [positions[job_id] for job_id in claimed] == list(range(len(jobs)))


async def test_claims_across_partitions_follow_queue_scores_not_ids(make: Factory) -> None:
    lagging, ahead = await make(), await make()
    _lagging_ids(lagging, per_partition=2)
    first = (await ahead.engine.parts[0].submit(single())).job
    second = (await lagging.engine.parts[1].submit(single())).job  # a smaller id, submitted later
    assert second.id < first.id
    claimed = await ahead.claim("w1", [MODEL], max_jobs=2)
    assert [c.job.id for c in claimed] == [first.id, second.id]


async def test_queue_scores_increase_when_a_partitions_clock_goes_back(
    make: Factory, raw: Redis
) -> None:
    store = await make()
    home = store.engine.parts[0]
    future = 2**52  # microseconds: far past this clock (a failover to a master ahead)
    await raw.set(home.keys.seq, future)
    jobs = [(await home.submit(single())).job for _ in range(3)]
    scores = [await raw.zscore(home.keys.queue(MODEL, Priority.BATCH), job.id) for job in jobs]
    assert scores == [future + 1, future + 2, future + 3]


async def test_equal_scores_in_two_partitions_claim_the_lower_partition_first(
    make: Factory, raw: Redis
) -> None:
    store = await make()
    for part in store.engine.parts:  # every partition hands out the same next score
        await raw.set(part.keys.seq, 2**52)
    later = (await store.engine.parts[2].submit(single())).job
    earlier = (await store.engine.parts[0].submit(single())).job
    positions = [(await store.get(TENANT, job.id)).queue_position for job in (earlier, later)]
    assert positions == [0, 1]
    claimed = await store.claim("w1", [MODEL], max_jobs=2)
    assert [c.job.id for c in claimed] == [earlier.id, later.id]


async def _zset_reads(raw: Redis) -> int:
    """Sorted-set reads Redis ran so far, scripts' own included (INFO commandstats)."""
    stats = await raw.info("commandstats")
    names = ("zcount", "zcard", "zrange", "zrank", "zscore", "zrangebyscore")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


async def _reads_of_a_get(store: RedisStore, raw: Redis, job_id: str) -> int:
    """The fewest of three Gets: commandstats counts the whole server, and a
    store's background pass may read a sorted set meanwhile (the clean-clone
    CI of 642fc9f once counted 10 against 9)."""
    counts = []
    for _ in range(3):
        before = await _zset_reads(raw)
        await store.get(TENANT, job_id)
        counts.append(await _zset_reads(raw) - before)
    return min(counts)


async def test_a_positions_cost_does_not_grow_with_the_other_partitions_queues(
    make: Factory, raw: Redis
) -> None:
    store = await make()
    job = (await store.engine.parts[0].submit(single())).job
    reads_short = await _reads_of_a_get(store, raw, job.id)
    queued = 20_000
    for part in store.engine.parts[1:]:  # long queues ahead of the job elsewhere
        await raw.zadd(part.keys.queue(MODEL, Priority.BATCH), {f"x{i}": i for i in range(queued)})
    reads_long = await _reads_of_a_get(store, raw, job.id)
    assert reads_long == reads_short
    assert (await store.get(TENANT, job.id)).queue_position == 2 * queued


def test_position_elsewhere_lua_only_counts() -> None:
    text = (files("store") / "lua" / "position_elsewhere.lua").read_text()
    code = text.split("]]", 1)[1]  # after the header
    assert set(re.findall(r"redis\.call\('(\w+)'", code)) == {"ZCOUNT", "ZCARD"}
    assert "while" not in code and "repeat" not in code
    # its loops are over the KEYS (the job's priority's queues, the higher
    # priorities'), not over a queue
    assert re.findall(r"\bfor\b[^\n]*", code) == [
        "for i = 1, same do",
        "for i = same + 1, #KEYS do",
    ]


async def test_events_of_every_partition_are_merged_in_stream_order(make: Factory) -> None:
    store = await make()
    jobs = [(await store.submit(single())).job for _ in range(6)]
    for job in jobs:
        await store.cancel(TENANT, job.id)
    events = await store.events(count=1000)
    assert sorted((e.job_id, e.to_status) for e in events) == sorted(
        (job.id, status) for status in (JobStatus.QUEUED, JobStatus.CANCELLED) for job in jobs
    )
    # time order, to the millisecond (a stream id's resolution; partitions
    # appending in the same millisecond are in no order among themselves)
    stamps = [int(e.id.split(",")[partition_of(e.job_id, 3)].split("-")[0]) for e in events]
    assert stamps == sorted(stamps)


async def test_reading_on_from_each_event_misses_and_repeats_nothing(make: Factory) -> None:
    store = await make()
    for _ in range(5):
        job = (await store.submit(single())).job
        await store.cancel(TENANT, job.id)
    everything = [(e.job_id, e.to_status) for e in await store.events(count=1000)]
    walked: list[tuple[str, JobStatus]] = []
    after = "0"
    while page := await store.events(after=after, count=1):
        walked += [(e.job_id, e.to_status) for e in page]
        after = page[-1].id
    assert walked == everything
    assert len(everything) == 10


async def test_the_newest_event_cursor_reads_only_later_events(make: Factory) -> None:
    store = await make()
    for _ in range(3):
        await store.submit(single())
    after = await store.newest_event_id()
    later = (await store.submit(single())).job
    assert [e.job_id for e in await store.events(after=after)] == [later.id]


@pytest.mark.usefixtures("pushed_wake_ups_only")
@pytest.mark.parametrize("index", [0, 1, 2])
async def test_a_blocking_events_read_wakes_on_any_partitions_event(
    make: Factory, index: int
) -> None:
    store = await make()
    after = await store.newest_event_id()
    reading = asyncio.create_task(store.events(after=after, block=timedelta(seconds=60)))

    async def blocked() -> bool:
        return store.engine.waiting_event_reads() > 0

    await assert_eventually(blocked, message="the read is not waiting")
    job = (await store.engine.parts[index].submit(single())).job
    events = await asyncio.wait_for(reading, 30)
    assert [e.job_id for e in events] == [job.id]


async def test_a_cursor_of_another_partition_count_is_refused(make: Factory) -> None:
    store = await make()
    with pytest.raises(InvalidRequest, match="cursor of 3 partitions"):
        await store.events(after="0,0")


# -- a claim over several partitions is given back whole -----------------------------


async def _one_job_per_partition(store: RedisStore) -> list[str]:
    return [(await part.submit(single())).job.id for part in store.engine.parts]


async def _all_queued_again(store: RedisStore, ids: list[str]) -> bool:
    jobs = [await store.get(TENANT, job_id) for job_id in ids]
    return all(job.status is JobStatus.QUEUED and job.attempts == 0 for job in jobs)


async def test_a_partition_failing_a_claim_gives_back_the_others_leases(
    make: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make()
    ids = await _one_job_per_partition(store)

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("partition 1 is down")

    monkeypatch.setattr(store.engine.parts[1], "claim", broken)
    with pytest.raises(StoreUnavailable):
        await store.claim("w1", [MODEL], max_jobs=3)
    assert await _all_queued_again(store, ids)


async def test_a_claim_whose_caller_is_gone_gives_back_every_partitions_leases(
    make: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make()
    ids = await _one_job_per_partition(store)
    reached, gate = asyncio.Event(), asyncio.Event()
    real_claim = store.engine.parts[1].claim

    async def slow(*args: Any, **kwargs: Any) -> Any:
        leases = await real_claim(*args, **kwargs)  # leased, not yet answered
        reached.set()
        await gate.wait()
        return leases

    monkeypatch.setattr(store.engine.parts[1], "claim", slow)
    claiming = asyncio.create_task(store.claim("w1", [MODEL], max_jobs=3))
    await asyncio.wait_for(reached.wait(), 10)
    claiming.cancel()
    with pytest.raises(asyncio.CancelledError):
        await claiming
    gate.set()

    async def given_back() -> bool:
        return await _all_queued_again(store, ids)

    await assert_eventually(given_back, message="the leases were not given back")


# -- recovery ----------------------------------------------------------------------


@pytest.fixture
def recovery_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The recovery scripts and ListJobs drains recover() runs, in order."""
    calls: list[str] = []
    run_script = recovery._recover_all

    async def script(part: Partition, name: str, extra: Any) -> Any:
        calls.append(name)
        return await run_script(part, name, extra)

    drain = PartitionLister.drain

    async def drained(lister: PartitionLister, client: Any) -> int:
        calls.append("drain")
        return await drain(lister, client)

    monkeypatch.setattr(recovery, "_recover_all", script)
    monkeypatch.setattr(PartitionLister, "drain", drained)
    return calls


async def test_a_recovery_step_with_nothing_due_runs_no_recovery_script(
    make: Factory, recovery_calls: list[str]
) -> None:
    store = await make(12)
    for _ in range(24):
        await store.submit(single())

    assert await store.recover() == []
    assert recovery_calls == []


async def test_a_recovery_step_runs_the_script_of_what_is_due_where_it_is_due(
    make: Factory, recovery_calls: list[str]
) -> None:
    store = await make(12, lease_timeout=timedelta(milliseconds=1))
    job = (await store.submit(single())).job
    [claimed] = await store.claim("w1", [MODEL])

    async def requeued() -> bool:
        await store.recover()
        return (await store.get(TENANT, job.id)).status is JobStatus.QUEUED

    await assert_eventually(requeued, message="the expired lease was never recovered")
    assert claimed.job.id == job.id
    assert set(recovery_calls) == {"recover_leases"}
