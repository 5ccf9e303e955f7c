"""Fair share between tenants on every store (DESIGN, "Fair share between tenants").

Under --fair-share tenant a job's queue score is its pass: max(its tenant's
last pass, the pass last handed out) + PASS_UNIT / weight. Claims take the
lowest (pass, id), so backlogged tenants interleave by weight, FIFO within
each, and a tenant back from idle starts at the pass being handed out now.
"""

from __future__ import annotations

from collections import Counter

from store import Store
from store.model import GroupSpec, JobStatus, Priority, ResultReport, SubmitRequest
from tests.store.conftest import MODEL, MakeStore, spec


async def _submit(store: Store, tenant: str, count: int, weight: int = 1) -> list[str]:
    ids = []
    for _ in range(count):
        request = SubmitRequest(tenant, spec(), weight=weight)
        ids.append((await store.submit(request)).job.id)
    return ids


async def _claims(store: Store, count: int) -> list[str]:
    claimed: list[str] = []
    while len(claimed) < count:
        batch = await store.claim("w1", [MODEL], max_jobs=min(64, count - len(claimed)))
        assert batch, "the backlog ran out"
        claimed += [c.job.tenant for c in batch]
    return claimed


async def test_a_tenants_jobs_are_claimed_in_submit_order(store: Store) -> None:
    ids = await _submit(store, "a", 5)
    await _submit(store, "b", 5)
    claimed = await store.claim("w1", [MODEL], max_jobs=10)
    assert [c.job.id for c in claimed if c.job.tenant == "a"] == ids


async def test_two_backlogged_tenants_of_equal_weight_alternate(store: Store) -> None:
    await _submit(store, "a", 50)
    await _submit(store, "b", 50)
    window = await _claims(store, 40)
    assert Counter(window) == {"a": 20, "b": 20}


async def test_backlogged_tenants_share_claims_by_weight(store: Store) -> None:
    await _submit(store, "heavy", 300, weight=3)
    await _submit(store, "light", 300, weight=1)
    window = await _claims(store, 20 * (3 + 1))
    counts = Counter(window)
    assert abs(counts["heavy"] / counts["light"] - 3) <= 0.3  # within 10 %


async def test_a_tenant_behind_a_backlog_is_served_within_its_share(store: Store) -> None:
    await _submit(store, "flood", 1000)
    await _claims(store, 10)
    late = set(await _submit(store, "small", 5))
    window = await _claims(store, 5 * 2 + 2)  # k * W / w + T claims
    assert window.count("small") == len(late)


async def test_an_idle_tenant_earns_no_credit_for_its_idle_time(store: Store) -> None:
    await _submit(store, "a", 200)
    await _submit(store, "b", 200)
    await _claims(store, 120)  # a and b move on; c stays idle
    await _submit(store, "c", 60)
    counts = Counter(await _claims(store, 30))
    assert counts["c"] <= 11  # a third of the claims (30 / 3, one of rounding), not all of them


async def test_with_fair_share_off_one_fifo_order_spans_the_tenants(
    make_store: MakeStore,
) -> None:
    store = await make_store(fair_share=False)
    await _submit(store, "flood", 10)
    await _submit(store, "small", 2)
    assert (await _claims(store, 12))[-2:] == ["small", "small"]


async def test_a_pools_queue_and_the_any_pool_queue_share_one_fair_order(
    store: Store,
) -> None:
    for _ in range(10):
        await store.submit(SubmitRequest("a", spec(pool="onprem")))
        await store.submit(SubmitRequest("b", spec()))
    claimed = await store.claim("w1", [MODEL], max_jobs=10, pool="onprem")
    assert Counter(c.job.tenant for c in claimed) == {"a": 5, "b": 5}


async def test_a_released_group_child_takes_its_place_when_released(store: Store) -> None:
    # a serial group's next child is queued when the one before ends: at the
    # pass handed out then, so it comes within a round of the backlog, and
    # the time it waited held does not put it ahead of everything
    children = tuple(spec() for _ in range(2))
    await store.submit(SubmitRequest("g", GroupSpec(children, max_parallel=1)))
    await _submit(store, "a", 30)
    claimed = [(await store.claim("w1", [MODEL]))[0] for _ in range(2)]  # g ties with a's first
    [first] = [c for c in claimed if c.job.tenant == "g"]
    assert (await _claims(store, 10)) == ["a"] * 10  # g has nothing queued meanwhile
    await store.record_result(first.job.id, first.lease_id, ResultReport(JobStatus.COMPLETED))
    assert "g" in await _claims(store, 2)


async def test_a_higher_priority_is_still_claimed_first(store: Store) -> None:
    await _submit(store, "a", 5)
    urgent = SubmitRequest("b", spec(), priority=Priority.INTERACTIVE)
    job = (await store.submit(urgent)).job
    assert (await store.claim("w1", [MODEL]))[0].job.id == job.id
