"""Redis commands per call of each transition, from INFO commandstats (run as a script).

    python bench/transition_commands.py REDIS_URL CALLS    # prints JSON

Uses only the store API that predates ListJobs' indexes, so bench/listing.py
can run it on the tree before them (PYTHONPATH pointing there) and on this
one, and compare. Each transition runs CALLS times after its setup; the
statistics are reset between (CONFIG RESETSTAT) and read after. The
commands counted are those the scripts ran (EVALSHA itself and the bench's
own INFO/CONFIG are left out).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from store.model import GroupSpec, JobSpec, JobStatus, StoreSettings, SubmitRequest
from store.redis import RedisStore

TENANT = "acme"
_NOT_SCRIPT_WORK = frozenset({"evalsha", "eval", "info", "config", "script", "ping", "hello",
                              "client", "select", "subscribe", "ssubscribe"})  # fmt: skip


async def _counted(
    client: Redis, calls: int, action: Callable[[], Awaitable[None]]
) -> dict[str, float]:
    await client.config_resetstat()
    await action()
    stats = await client.info("commandstats")
    per_call = {
        name.removeprefix("cmdstat_"): int(row["calls"]) / calls
        for name, row in stats.items()
        if name.removeprefix("cmdstat_") not in _NOT_SCRIPT_WORK
    }
    per_call["total"] = sum(per_call.values())
    return per_call


async def measure(url: str, calls: int) -> dict[str, dict[str, float]]:
    store = RedisStore(url, StoreSettings(), partition=f"cmd{uuid.uuid4().hex[:8]}")
    await store.open()
    client = Redis.from_url(url)
    model = "bench-cmd"
    single = SubmitRequest(TENANT, JobSpec(model, b"x" * 64))
    found: dict[str, dict[str, float]] = {}
    try:

        async def submits() -> None:
            for _ in range(calls):
                await store.submit(single)

        found["submit"] = await _counted(client, calls, submits)
        leases = []

        async def claims() -> None:
            for _ in range(calls):
                leases.extend(await store.claim("w1", [model]))

        found["claim"] = await _counted(client, calls, claims)

        async def heartbeats() -> None:
            for lease in leases:
                await store.heartbeat(lease.job.id, lease.lease_id, 0.5, "")

        found["heartbeat"] = await _counted(client, calls, heartbeats)

        async def completions() -> None:
            for lease in leases[: calls // 2]:
                await store.set_result(lease.job.id, lease.lease_id, JobStatus.COMPLETED)
            for lease in leases[calls // 2 :]:
                await store.set_result(lease.job.id, lease.lease_id, JobStatus.FAILED)

        found["set_result (completed/failed)"] = await _counted(client, calls, completions)
        queued = [(await store.submit(single)).job.id for _ in range(calls)]

        async def cancels() -> None:
            for job_id in queued:
                await store.cancel(TENANT, job_id)

        found["cancel (queued)"] = await _counted(client, calls, cancels)
        group = SubmitRequest(TENANT, GroupSpec(tuple(JobSpec(model) for _ in range(3)), 1))

        async def groups() -> None:
            for _ in range(calls):
                await store.submit(group)

        found["submit (group of 3, max_parallel 1)"] = await _counted(client, calls, groups)
        children = await store.claim("w1", [model], max_jobs=64)
        while len(children) < calls:
            children += await store.claim("w1", [model], max_jobs=64)

        async def child_ends() -> None:
            for lease in children[:calls]:
                await store.set_result(lease.job.id, lease.lease_id, JobStatus.COMPLETED)

        found["set_result (a child, releasing the next)"] = await _counted(
            client, calls, child_ends
        )
    finally:
        await client.aclose()
        await store.close()
    return found


def main() -> None:
    url, calls = sys.argv[1], int(sys.argv[2])
    print(json.dumps(asyncio.run(measure(url, calls))))


if __name__ == "__main__":
    main()
