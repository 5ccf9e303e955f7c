"""LocalEngine's ListJobs runs (store/memory/index.py): kept by the transitions, emptied at TTL."""

from __future__ import annotations

from datetime import UTC, datetime

import hypothesis
from hypothesis import strategies as st

from store.listing import micros, timestamp_micros
from store.memory import LocalStore
from store.model import GroupSpec, JobSpec, JobStatus, StoreSettings, SubmitRequest

TENANT = "acme"
MODEL = "llm-small"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _indexed(store: LocalStore) -> set[str]:
    index = store.engine.state.index
    return {
        job_id
        for runs in (index.status_runs, index.model_runs)
        for run in runs.values()
        for _, job_id in run
    }


async def test_a_job_is_in_one_status_run_and_one_model_run() -> None:
    store = LocalStore(StoreSettings())
    job = (await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job
    await store.claim("w1", [MODEL])
    index = store.engine.state.index
    assert [name for name, run in index.status_runs.items() if run] == [
        (TENANT, JobStatus.PROCESSING, job.kind)
    ]
    assert list(index.model_runs) == [(TENANT, MODEL)]


async def test_jobs_past_their_ttl_leave_every_run() -> None:
    clock = Clock()
    store = LocalStore(StoreSettings(), clock=clock)
    job = (await store.submit(SubmitRequest(TENANT, JobSpec(MODEL)))).job
    group = (await store.submit(SubmitRequest(TENANT, GroupSpec((JobSpec("m2"),))))).job
    await store.cancel(TENANT, job.id)
    await store.cancel(TENANT, group.id)
    assert len(_indexed(store)) == 3
    clock.now += StoreSettings().result_ttl.total_seconds() + 1
    await store.recover()
    assert _indexed(store) == set()
    assert store.engine.state.index.status_runs == {}


@hypothesis.settings(max_examples=2000, deadline=None)
@hypothesis.given(
    st.one_of(
        st.floats(min_value=0, max_value=4e9, allow_nan=False),
        # ties: a fraction of exactly half a microsecond either way
        st.integers(0, 4_000_000_000_000_000).map(lambda us: us / 1e6 + 5e-7),
        st.integers(0, 4_000_000_000_000_000).map(lambda us: us / 1e6 - 5e-7),
    )
)
def test_a_records_index_key_is_its_snapshots_create_time_in_microseconds(
    timestamp: float,
) -> None:
    # a cursor made from a listed Job must find the key the index made
    snapshot_time = datetime.fromtimestamp(timestamp, tz=UTC)
    assert timestamp_micros(timestamp) == micros(snapshot_time)
