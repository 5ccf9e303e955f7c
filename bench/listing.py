"""ListJobs against the jobs held, the memory its indexes take, and what they add per transition.

Fill: jobs of one tenant ("default", the gateway runs open) through the
store's own submit script, pipelined (as bench/depth.py), 64-byte payloads,
four models in turn, caps raised; then a worker loop on the store
(report_and_claim, 64 at a time) ends 90 % of them, in the mix
MIX: of every 10 jobs, 7 COMPLETED, 2 FAILED, 1 left QUEUED. Probes:
ListJobs over gRPC (the gateway), page_size 50, for no filter, `status =
FAILED` and `model = <one of four>`, each for the first page and for a page
from a cursor half-way down the jobs.

Memory: MEMORY USAGE (every element counted) of the index keys over the
jobs held: index:status, the (tenant, model) runs, and index:expiring
(which holds the terminal jobs only).

Commands per transition: bench/transition_commands.py runs each transition
N times on a fresh redis-server and reads INFO commandstats, once on this
tree and once on the tree before the indexes (the parent of the commit that
added store/lua/includes/index.lua, extracted with `git archive`), in one
sitting.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from redis.asyncio import Redis

from bench.sampling import timed
from bench.servers import Topology
from gateway_server.list_filter import parse_filter
from gateway_server.page_token import encode_page_token
from jobgate.v1 import job_service_pb2, job_service_pb2_grpc
from store.errors import StoreUnavailable
from store.model import (
    JobSpec,
    JobStatus,
    LeaseResult,
    ListCursor,
    ResultReport,
    StoreSettings,
    SubmitRequest,
)
from store.redis import RedisStore
from store.redis.calls import ScriptCall
from store.redis.partition import _spec_declared
from store.redis.scripts import ArgValue, read_script

TENANT = "default"
MODELS = tuple(f"bench-list-{i}" for i in range(4))
PAYLOAD = b"x" * 64
PAGE_SIZE = 50
PIPELINE = 1000
MIX = "70 % COMPLETED, 20 % FAILED, 10 % QUEUED; 4 models in turn"
FILTERS = {"no filter": "", "status = FAILED": "status = FAILED", "model =": f"model = {MODELS[0]}"}
WARMUP_CALLS = 20
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ListRow:
    jobs: int
    fill_rate: float
    #: filter label -> (first-page samples, mid-walk samples), seconds
    samples: dict[str, tuple[list[float], list[float]]]
    #: index key kind -> bytes per job held
    memory: dict[str, float]


class Filler:
    """Queues jobs through RedisStore's submit script and ends most of them on the store."""

    def __init__(self, url: str) -> None:
        big = 10**9
        self.store = RedisStore(url, StoreSettings(max_live_per_tenant=big, max_live_total=big))
        self.client = Redis.from_url(url)
        self.sha = read_script("submit").sha
        self.submitted = 0
        self.middle: ListCursor | None = None

    async def open(self) -> None:
        await self.store.open()

    async def submit(self, count: int) -> None:
        part, s = self.store.engine.owner, self.store.settings
        head: list[ArgValue] = [TENANT, "", s.max_live_per_tenant, s.max_live_total,
                                s.max_group_children]  # fmt: skip
        while count > 0:
            size = min(PIPELINE, count)
            pipe = self.client.pipeline(transaction=False)
            for i in range(size):
                model = MODELS[(self.submitted + i) % len(MODELS)]
                spec, payloads = part._spec(SubmitRequest(TENANT, JobSpec(model, PAYLOAD)))
                call = ScriptCall("submit", [*head, json.dumps(spec), 0, *payloads],
                                  _spec_declared(spec), trailing=[part._op_key()])  # fmt: skip
                keys, args = call.keys_and_args(part.keys, part._common_args())
                pipe.evalsha(self.sha, len(keys), *keys, *args)
            replies = await pipe.execute()
            if any(not (isinstance(r, list) and r[0] == 1) for r in replies):
                raise RuntimeError("a bulk submit was refused")
            self.submitted += size
            count -= size

    async def end(self, count: int) -> None:
        """Claim `count` of the oldest queued jobs and end them in the mix."""
        done = 0
        held: list[LeaseResult] = []
        while done < count or held:
            want = min(64, count - done)
            try:
                step = await self.store.report_and_claim("bench", MODELS, held, want)
            except StoreUnavailable:  # a slow reply on a loaded machine: send the results again
                await asyncio.sleep(0.5)  # (a repeat is answered as the first; leases expire)
                continue
            held = []
            for claimed in step.claimed:
                done += 1
                failed = done % 9 in (3, 7)  # 2 of every 9 ended: 20 % of all jobs
                report = ResultReport(JobStatus.FAILED if failed else JobStatus.COMPLETED)
                held.append((claimed.job.id, claimed.lease_id, report))
            if not step.claimed and not held:
                break

    async def memory(self) -> dict[str, float]:
        keys = self.store.engine.owner.keys
        runs = [keys.index_model(TENANT, model) for model in MODELS]
        sizes = {}
        for label, names in (("index:status", [keys.index_status]),
                             ("(tenant, model) runs", runs),
                             ("index:expiring", [keys.index_expiring])):  # fmt: skip
            total = 0
            for name in names:
                total += int(await self.client.memory_usage(name, samples=0) or 0)
            sizes[label] = total / self.submitted
        sizes["all index keys"] = sum(sizes.values())
        return sizes

    async def close(self) -> None:
        await self.client.aclose()
        await self.store.close()


def _pager(
    jobs: job_service_pb2_grpc.JobServiceAsyncStub, request: job_service_pb2.ListJobsRequest
) -> Callable[[], Awaitable[None]]:
    async def page() -> None:
        answer = await jobs.ListJobs(request)
        if len(answer.jobs) != PAGE_SIZE:
            raise RuntimeError(f"{request.filter!r}: a page of {len(answer.jobs)}")

    return page


async def _probe(
    jobs: job_service_pb2_grpc.JobServiceAsyncStub, middle: ListCursor, calls: int
) -> dict[str, tuple[list[float], list[float]]]:
    found: dict[str, tuple[list[float], list[float]]] = {}
    for label, text in FILTERS.items():
        token = encode_page_token(middle, TENANT, parse_filter(text))
        first = _pager(jobs, job_service_pb2.ListJobsRequest(filter=text, page_size=PAGE_SIZE))
        deep = _pager(
            jobs,
            job_service_pb2.ListJobsRequest(filter=text, page_size=PAGE_SIZE, page_token=token),
        )
        await timed(WARMUP_CALLS, first)
        found[label] = (await timed(calls, first), await timed(calls, deep))
    return found


async def list_rows(topology: Topology, depths: list[int], calls: int) -> list[ListRow]:
    assert topology.redis is not None
    filler = Filler(topology.redis.url)
    await filler.open()
    channel = grpc.aio.insecure_channel(topology.job_target)
    jobs = job_service_pb2_grpc.JobServiceStub(channel)
    rows: list[ListRow] = []
    try:
        for depth in depths:
            started = time.monotonic()
            # the first half of the new jobs, then the middle job's cursor, then the rest
            added = depth - filler.submitted
            await filler.submit(added // 2)
            await filler.end(added // 2 * 9 // 10)
            page = await filler.store.list_jobs(TENANT, parse_filter(""), None, 1)
            newest = page.jobs[0]
            middle = ListCursor(newest.create_time, newest.id)
            await filler.submit(added - added // 2)
            await filler.end((added - added // 2) * 9 // 10)
            rate = added / max(1e-9, time.monotonic() - started)
            samples = await _probe(jobs, middle, calls)
            rows.append(ListRow(depth, rate, samples, await filler.memory()))
    finally:
        await filler.close()
        await channel.close(None)
    return rows


# -- commands per transition, before and after ----------------------------------


def _base_tree(workdir: Path) -> tuple[Path, str]:
    """The tree before the indexes, extracted: (its root, its commit)."""
    added = subprocess.run(
        ["git", "log", "--format=%H", "--diff-filter=A", "-1", "--",
         "store/lua/includes/index.lua"],
        capture_output=True, text=True, check=True, cwd=HERE.parent,
    ).stdout.strip()  # fmt: skip
    base = f"{added}^"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", base],
        capture_output=True, text=True, check=True, cwd=HERE.parent,
    ).stdout.strip()  # fmt: skip
    root = workdir / "base"
    root.mkdir()
    archive = subprocess.run(
        ["git", "archive", base, "store"], capture_output=True, check=True, cwd=HERE.parent
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root, commit


def _measure(tree: Path, url: str, calls: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    script = HERE / "transition_commands.py"
    output = subprocess.run(
        [sys.executable, str(script), url, str(calls)],
        capture_output=True, text=True, check=True, cwd=tree, env=env,
    ).stdout  # fmt: skip
    measured: dict[str, dict[str, float]] = json.loads(output)
    return measured


def transition_commands(
    url: str, calls: int
) -> tuple[str, dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """(base commit, before, after): Redis commands per call of each transition."""
    with tempfile.TemporaryDirectory(prefix="jobgate-bench-base-") as workdir:
        base, commit = _base_tree(Path(workdir))
        before = _measure(base, url, calls)
    after = _measure(HERE.parent, url, calls)
    return commit, before, after
