"""The audit stream (DESIGN: Audit): every transition, in the same atomic step.

Read black-box through `jobgate events --json`, which reads the stream in
Redis; the embedded store's stream lives inside the serve process, so these
tests run on the Redis topology only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.e2e.api import Api, spec
from tests.e2e.harness import REPO_ROOT, Deployment, server_environment

# The embedded store's stream lives inside the serve process: Redis topologies only
# (one partition, and three merged by `jobgate events --redis-partitions 3`).
pytestmark = pytest.mark.parametrize("deployment", ["redis", "redis3"], indirect=True)


def events_of(deployment: Deployment, job_id: str) -> list[dict[str, Any]]:
    argv = [sys.executable, "-m", "jobgate.cli", "events", "--json", "--job", job_id]
    argv += ["--redis-url", deployment.settings["redis-url"]]
    argv += ["--redis-partition", deployment.settings["redis-partition"]]
    argv += ["--redis-partitions", deployment.settings.get("redis-partitions", "1")]
    completed = subprocess.run(
        argv,
        capture_output=True,
        env=server_environment(),
        cwd=REPO_ROOT,
        timeout=20,
        check=True,
    )
    return [json.loads(line) for line in completed.stdout.decode().splitlines() if line]


async def test_every_transition_of_a_job_is_in_the_audit_stream(
    api: Api, model: str, deployment: Deployment, tenant: str
) -> None:
    job = await api.submit(model, max_attempts=3)
    first = await api.claim_one(model)
    await api.fail(job.id, first.lease_id, retryable=True)
    second = await api.claim_one(model, wait=5.0)
    await api.complete(job.id, second.lease_id)

    events = events_of(deployment, job.id)

    assert [(e["from"], e["to"], e["attempts"]) for e in events] == [
        (None, "queued", 0),
        ("queued", "processing", 1),
        ("processing", "queued", 1),
        ("queued", "processing", 2),
        ("processing", "completed", 2),
    ]
    assert {(e["job_id"], e["tenant"], e["model"]) for e in events} == {(job.id, tenant, model)}
    assert {e["worker_id"] for e in events if e["to"] == "processing"} == {api.worker_id}
    assert all(e["time"] for e in events)


async def test_a_childs_events_name_its_parent(
    api: Api, model: str, deployment: Deployment
) -> None:
    group = await api.submit_group([spec(model)])
    await api.run_to_completion(model)

    events = events_of(deployment, group.id)

    child_events = [e for e in events if e["job_id"] != group.id]
    assert child_events and {e["parent_job_id"] for e in child_events} == {group.id}
    assert [e["to"] for e in events if e["job_id"] == group.id][-1] == "completed"
