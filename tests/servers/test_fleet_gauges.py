"""jobgate_workers{pool} (a series per known pool, 0 included) and jobgate_pool_queue_depth."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from jobgate.v1 import worker_service_pb2
from serving.auth import Authenticator
from store.memory import LocalStore
from store.model import Priority, StoreSettings
from tests.helpers import assert_eventually
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness


def auth_file(path: Path, pools: dict[str, str]) -> Authenticator:
    entries = [
        {"sha256": hashlib.sha256(token.encode()).hexdigest(), "tenant": "fleet", "role": "worker"}
        | {"pool": pool}
        for token, pool in pools.items()
    ]
    path.write_text(json.dumps({"tokens": entries}))
    return Authenticator.from_file(str(path))


async def workers_in(harness: Harness, pool: str) -> float | None:
    return await harness.value("jobgate_workers", {"pool": pool})


async def test_a_pool_the_auth_file_names_has_a_series_at_zero(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    auth = auth_file(tmp_path / "auth.json", {"t1": "gpu-a", "t2": "gpu-b"})
    harness = await make_harness(auth=auth)
    assert (await workers_in(harness, "gpu-a"), await workers_in(harness, "gpu-b")) == (0, 0)


async def test_a_worker_counts_in_the_pool_it_serves(harness: Harness) -> None:
    request = worker_service_pb2.ClaimNextRequest(worker_id="w1", models=["m"], pool="gpu-a")
    await harness.worker.ClaimNext(request, timeout=5)

    async def counted() -> bool:
        return await workers_in(harness, "gpu-a") == 1

    await assert_eventually(counted, message="the worker is not counted")


async def test_an_unknown_pool_has_no_series(harness: Harness) -> None:
    assert await workers_in(harness, "nobody-named-it") is None


class QueuedInPool(LocalStore):
    """A store whose ready counts show jobs queued for pool gpu-c."""

    async def ready_counts(self) -> dict[tuple[str, Priority, str], int]:
        return {("m", Priority.BATCH, "gpu-c"): 2}


async def test_a_pool_with_queued_jobs_and_no_worker_has_a_series_at_zero(
    make_harness: MakeHarness,
) -> None:
    harness = await make_harness(store=QueuedInPool(StoreSettings()))
    assert await workers_in(harness, "gpu-c") == 0


async def test_queued_jobs_are_counted_per_model_and_pool(harness: Harness) -> None:
    for _ in range(2):
        await harness.submit("m")
    depth = await harness.value("jobgate_pool_queue_depth", {"model": "m", "pool": ""})
    assert depth == 2
