"""Tenancy under attack: tenant B probing tenant A's ids on every JobService RPC, and
one tenant flooding at many times its quota while another submits calmly.

The flood is refused and nothing of either tenant is lost (asserted). The
calm tenant's Submit p50 with and without the flood is measured and handed to
`timings`; the bench holds it within 10 % (bench/timing.py), since on a
loaded machine the scheduler moves a p50 by more than admission does."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import uuid
from collections.abc import Callable

import grpc
import pytest

from jobgate.v1 import job_service_pb2
from tests.e2e.harness import REPO_ROOT, server_environment
from tests.faults.conftest import RigFactory, Scale
from tests.faults.ledger import Call
from tests.faults.rig import Figures, Load, Rig, assert_clean, figures_of, payload
from tests.timings import Timings

pytestmark = [pytest.mark.redis, pytest.mark.scenario]

OWNER, PROBER = "acme", "eve"
QUOTA = 20
#: Submits per second the flooding tenant offers: its whole quota, five times a second.
FLOOD_RATE = 5 * QUOTA


def never_existed(job_id: str) -> str:
    """A well-formed id of the same shape that no job has."""
    tail = "ZZZZ" if not job_id.endswith("ZZZZ") else "YYYY"
    return job_id[:-4] + tail


async def answer(call: object) -> tuple[str, str]:
    """(code, details with the id blanked) of a call that must fail."""
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code().name, error.details() or ""
    raise AssertionError("a probe of another tenant's job succeeded")


async def probe(rig: Rig, job_id: str) -> list[tuple[str, tuple[str, str], tuple[str, str]]]:
    """Each RPC on `job_id` as the prober, beside the same RPC on an id that never existed;
    the pairs whose answers differ."""
    stub = rig.stubs[0]
    metadata = (("x-jobgate-tenant", PROBER),)
    ghost = never_existed(job_id)
    differing = []
    for name, make in (
        ("Get", lambda i: stub.Get(job_service_pb2.GetRequest(job_id=i), metadata=metadata)),
        (
            "Cancel",
            lambda i: stub.Cancel(job_service_pb2.CancelRequest(job_id=i), metadata=metadata),
        ),
        (
            "StreamStatus",
            lambda i: stub.StreamStatus(
                job_service_pb2.StreamStatusRequest(job_id=i), metadata=metadata, timeout=5
            ),
        ),
    ):
        real = await answer(make(job_id))
        fake = await answer(make(ghost))
        real = (real[0], real[1].replace(job_id, "<id>"))
        fake = (fake[0], fake[1].replace(ghost, "<id>"))
        if real != fake or real[0] != "NOT_FOUND":
            differing.append((name, real, fake))
    return differing


async def test_tenant_probing_another_tenants_ids_on_every_rpc(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None]
) -> None:
    rig = make_rig()
    rig.start_worker(concurrency=4)
    keys = [uuid.uuid4().hex for _ in range(scale(20, 300))]
    async with Load(rig, OWNER, payload(0.05), parallel=2):
        owned = [await rig.submit_job(OWNER, payload(0.2), key=key) for key in keys]
        leaks = [d for job_id in owned for d in await probe(rig, job_id)]
        # The owner's idempotency keys mean nothing to another tenant: a new job of its own.
        stolen = [await rig.submit_job(PROBER, payload(), key=key) for key in keys]
    ledger = await rig.collect({OWNER: owned + rig_ids(rig, OWNER, owned), PROBER: stolen})

    assert leaks == []
    assert set(stolen).isdisjoint(owned)
    assert all(ledger.finals[j].tenant == PROBER for j in stolen)
    assert all(ledger.finals[j].status == "completed" for j in owned)
    assert_clean(ledger)
    figures(figures_of("tenant B probing tenant A's ids", ledger, len(owned) * 4))


def rig_ids(rig: Rig, tenant: str, exclude: list[str]) -> list[str]:
    """Every job the load submitted as `tenant`, besides `exclude`."""
    owned = set(exclude)
    ids = {c.job_id for c in rig.calls if c.method == "Submit" and c.code == "OK"}
    return sorted(i for i in ids & rig.accepted if i not in owned)


async def submit_calmly(rig: Rig, tenant: str, stop: asyncio.Event) -> list[Call]:
    """Submit jobs one after another through gateway-1 until `stop`; the calls."""
    before = len(rig.calls)
    while not stop.is_set():
        try:
            await rig.submit_job(tenant, payload(), first=1)
        except grpc.aio.AioRpcError as error:
            # Its own quota, when the workers fall behind on a loaded machine.
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.02)
    return [c for c in rig.calls[before:] if c.code == "OK" and c.method == "Submit"]


def split_by_windows(
    calls: list[Call], windows: list[list[float]]
) -> tuple[list[float], list[float]]:
    """Latencies of calls wholly inside a flood window, and wholly outside every one
    (a margin of 0.1 s around each edge is left out)."""
    inside, outside = [], []
    for call in calls:
        latency = call.end - call.start
        if any(start + 0.1 <= call.start and call.end <= end - 0.1 for start, end in windows):
            inside.append(latency)
        elif all(call.end < start - 0.1 or call.start > end + 0.1 for start, end in windows):
            outside.append(latency)
    return inside, outside


async def test_one_tenant_flooding_is_refused_and_loses_nothing_of_another_tenants(
    make_rig: RigFactory, scale: Scale, figures: Callable[[Figures], None], timings: Timings
) -> None:
    rig = make_rig(gateways=2, settings={"max-live-per-tenant": str(QUOTA)})
    for _ in range(2):
        rig.start_worker(concurrency=4)
    seconds = scale(16, 120)
    for _ in range(20):  # warm up channels and scripts
        await rig.submit_job("calm", payload(), first=1)
    stop = asyncio.Event()
    calming = asyncio.create_task(submit_calmly(rig, "calm", stop))
    flooder = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.faults.flood", rig.deployment.job_targets[0], "flood",
        "nobody", str(seconds), "4", str(FLOOD_RATE),
        stdout=asyncio.subprocess.PIPE, cwd=REPO_ROOT, env=server_environment(),
    )  # fmt: skip
    output, _ = await flooder.communicate()
    stop.set()
    counts = json.loads(output)
    flooded_calls, quiet_calls = split_by_windows(await calming, counts.pop("windows"))
    flooded, baseline = statistics.median(flooded_calls), statistics.median(quiet_calls)
    flood_ids: list[str] = counts.pop("ids")
    rig.accepted.update(flood_ids)
    for job_id in flood_ids:  # no worker serves "nobody": leave no live job behind
        await rig.cancel("flood", job_id)
    calm = [c.job_id for c in rig.calls if c.method == "Submit" and c.code == "OK"]
    ledger = await rig.collect({"calm": calm, "flood": flood_ids})

    assert counts["refused"] > 10 * counts["accepted"], counts
    assert_clean(ledger)
    timings("tenant flood: the calm tenant's Submit p50", baseline, "quiet")
    timings("tenant flood: the calm tenant's Submit p50", flooded, "flooded")
    figures(
        figures_of(
            "one tenant flooding at many times its quota",
            ledger,
            counts["refused"],
            calm_p50_ms=round(baseline * 1e3, 2),
            calm_p50_flooded_ms=round(flooded * 1e3, 2),
            calm_samples=[len(quiet_calls), len(flooded_calls)],
            flood=counts,
        )
    )
