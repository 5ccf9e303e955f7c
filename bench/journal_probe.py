"""The embedded store alone, no gRPC: process CPU a job in memory and in each --data-sync.

Two shapes: `single` (a Submit, then report_and_claim of 1 that reports the
previous job: two commits a job, as one Submit at a time through `serve`)
and `batch` (BatchSubmit of 100, then report_and_claim 8 at a time).

    python -m bench.journal_probe single normal 4000

A figure of one process's CPU, so less at the mercy of the host than the
end-to-end rows; compare trees by running this copy against each alternately
(`PYTHONPATH=<tree> python bench/journal_probe.py single memory`; `memory`
also runs on trees from before the durable store, such as c50a4cd).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from typing import TYPE_CHECKING

from store import open_store
from store.model import JobSpec, JobStatus, ResultReport, StoreSettings, SubmitRequest

if TYPE_CHECKING:  # names an older tree lacks: this copy also runs on c50a4cd (in memory)
    from store.model import LeaseResult
    from store.protocol import Store

PAYLOAD = b"x" * 1024
MODEL = "probe"


def _store(mode: str, directory: str) -> Store:
    if mode == "memory":
        return open_store(None, StoreSettings())
    return open_store(None, StoreSettings(), data_dir=directory, data_sync=mode)


def _request() -> SubmitRequest:
    return SubmitRequest("probe", JobSpec(MODEL, PAYLOAD))


async def _single(store: Store, jobs: int) -> None:
    results: list[LeaseResult] = []
    for _ in range(jobs):
        await store.submit(_request())
        reported = await store.report_and_claim("w1", [MODEL], results, 1)
        results = [
            (c.job.id, c.lease_id, ResultReport(JobStatus.COMPLETED)) for c in reported.claimed
        ]
    await store.report_and_claim("w1", [MODEL], results, 0)


async def _batch(store: Store, jobs: int) -> None:
    for _ in range(0, jobs, 100):
        await store.submit_batch([_request() for _ in range(100)])
    results: list[LeaseResult] = []
    while True:
        reported = await store.report_and_claim("w1", [MODEL], results, 8)
        if not reported.claimed:
            return
        results = [
            (c.job.id, c.lease_id, ResultReport(JobStatus.COMPLETED)) for c in reported.claimed
        ]


async def probe(shape: str, mode: str, jobs: int) -> tuple[float, float]:
    """Process CPU and wall ms a job."""
    with tempfile.TemporaryDirectory(prefix="jobgate-probe-") as directory:
        store = _store(mode, directory)
        await store.open()
        try:
            cpu, wall = time.process_time(), time.perf_counter()
            await (_single if shape == "single" else _batch)(store, jobs)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        finally:
            await store.close()
    return cpu / jobs * 1000, wall / jobs * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=["single", "batch"])
    parser.add_argument("mode", choices=["memory", "normal", "full"])
    parser.add_argument("jobs", type=int, nargs="?", default=4000)
    args = parser.parse_args()
    cpu, wall = asyncio.run(probe(args.shape, args.mode, args.jobs))
    print(f"{args.shape} {args.mode}: {cpu:.3f} ms CPU a job, {wall:.3f} ms wall a job")


if __name__ == "__main__":
    main()
