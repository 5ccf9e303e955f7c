"""The durable embedded store against the in-memory one (issue 22, part 5).

Three deployments of `jobgate serve`, each fresh, in one sitting and
interleaved as bench.fairness interleaves (in memory, normal, full, then
full, normal, in memory, ...): the end-to-end producers of section 1 and a
prefilled drain, one worker process at concurrency 8. The data directory is
a temporary directory on the same disk as the bench's own files.

Beside them: the disk's own fsyncs per second, measured alone (a 4 KiB
write and an fsync, in a loop, for a few seconds), which is what `full`
pays per commit; the restart time of a directory holding QUEUED and
COMPLETED jobs of 1 KiB payloads (start of the `serve` process to the
first answered Get, the directory's load included); and the bytes on disk
per queued job.

The restart's directory is filled in this process through the store
itself (LocalStore on that directory, `normal`), so the rows on disk are
the ones serve writes: first the queued jobs (the directory's size then
gives bytes per queued job), then the completed ones, submitted, claimed
and given their results.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import servers
from bench.e2e import Sizes
from bench.fairness import DRAIN, Sitting, one_sitting, producers
from bench.report import table
from bench.servers import Topology
from bench.sink import Sink
from jobgate import SyncJobClient
from store.memory import LocalStore
from store.model import JobSpec, JobStatus, ResultReport, StoreSettings, SubmitRequest
from tests.launcher import JobgateServer

MODES: Mapping[str, Mapping[str, str]] = {
    "in memory": {},
    "normal": {"data-sync": "normal"},
    "full": {"data-sync": "full"},
}
#: The targets: each mode's median at least this share of in-memory's.
BOUNDS = {"normal": 0.8, "full": 0.5}
RESTART_BOUND = 10.0  # seconds, for the full run's directory
PAYLOAD = b"p" * 1024
TENANT = "default"  # serve runs open: a Get without tenant metadata is "default"'s
QUEUED_MODEL, DONE_MODEL = "bench-restart-queued", "bench-restart-done"
BATCH = 100  # requests per submit_batch of the fill
#: Calls the fill keeps in flight, so they share the journal's commits.
FILL_CONCURRENCY = 16


@contextmanager
def _serve(settings: Mapping[str, str]) -> Iterator[Topology]:
    """`jobgate serve`, on a fresh data directory when the mode has a --data-sync."""
    if "data-sync" not in settings:
        with servers.embedded(settings) as topology:
            yield topology
        return
    with ExitStack() as stack:
        data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="jobgate-bench-data-"))
        yield stack.enter_context(servers.embedded({**settings, "data-dir": data_dir}))


def durable_sitting(sink: Sink, sizes: Sizes, repeats: int) -> Sitting:
    return one_sitting("embedded", _serve, sink, sizes, repeats, MODES, sizes.drain_jobs)


def fsyncs_per_second(directory: Path, seconds: float = 3.0) -> float:
    """A 4 KiB write and an fsync of one file in `directory`, in a loop: syncs per second."""
    path = directory / "fsync-probe"
    block = b"f" * 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        count, started = 0, time.monotonic()
        while (elapsed := time.monotonic() - started) < seconds:
            os.write(fd, block)
            os.fsync(fd)
            count += 1
        return count / elapsed
    finally:
        os.close(fd)
        path.unlink()


@dataclass(frozen=True)
class Restart:
    queued: int
    completed: int
    fill_seconds: float
    bytes_per_queued_job: float
    directory_bytes: int
    seconds: float  # start of the serve process to the first answered Get
    finished_seconds: float  # ... to the first answered Get of a COMPLETED job


def _directory_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.iterdir() if path.is_file())


def _store(directory: Path) -> LocalStore:
    big = 100_000_000
    settings = StoreSettings(max_live_per_tenant=big, max_live_total=big)
    return LocalStore(settings, data_dir=directory, data_sync="normal")


async def _submit(store: LocalStore, model: str, jobs: int) -> str:
    """`jobs` jobs of `model` in batches, FILL_CONCURRENCY batches at a time; the last id."""
    request = SubmitRequest(tenant=TENANT, work=JobSpec(model=model, payload=PAYLOAD))
    last = ""
    for start in range(0, jobs, BATCH * FILL_CONCURRENCY):
        sizes = [min(BATCH, jobs - at) for at in
                 range(start, min(jobs, start + BATCH * FILL_CONCURRENCY), BATCH)]  # fmt: skip
        answers = await asyncio.gather(*(store.submit_batch([request] * n) for n in sizes))
        last = answers[-1][-1].job.id
    return last


async def _complete(store: LocalStore, jobs: int) -> str:
    """Claim DONE_MODEL's jobs and give each its result, many calls sharing commits;
    the last one's id."""
    report = ResultReport(JobStatus.COMPLETED, b"done")
    done, last = 0, ""
    while done < jobs:
        claims = await asyncio.gather(
            *(store.claim("bench-fill", [DONE_MODEL], max_jobs=64) for _ in range(4))
        )
        claimed = [item for batch in claims for item in batch]
        if not claimed:
            raise RuntimeError(f"the fill found {jobs - done} completed jobs missing")
        await asyncio.gather(
            *(store.record_result(item.job.id, item.lease_id, report) for item in claimed)
        )
        done += len(claimed)
        last = claimed[-1].job.id
    return last


async def fill(directory: Path, queued: int, completed: int) -> tuple[str, str, float]:
    """Fill `directory`; (a queued job's id, a completed one's, bytes per queued job)."""
    store = _store(directory)
    await store.open()
    try:
        job_id = await _submit(store, QUEUED_MODEL, queued)
    finally:
        await store.close()
    per_queued = _directory_bytes(directory) / queued
    store = _store(directory)
    await store.open()
    try:
        await _submit(store, DONE_MODEL, completed)
        done_id = await _complete(store, completed)
    finally:
        await store.close()
    return job_id, done_id, per_queued


def _until_answered(client: SyncJobClient, job_id: str, started: float, timeout: float) -> float:
    while True:
        try:
            client.get(job_id)
            return time.monotonic() - started
        except Exception:  # not answering yet (UNAVAILABLE while it loads)
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.01)


def time_to_answers(
    directory: Path, queued_id: str, done_id: str, timeout: float = 120.0
) -> tuple[float, float]:
    """Seconds from starting `serve --data-dir directory` to its first answered Get of
    the queued job, then of the completed one (which waits for the finished jobs' load)."""
    settings = {**servers.COMMON_SETTINGS, "data-dir": str(directory), "data-sync": "normal"}
    server = JobgateServer("serve", directory.parent / "serve.log", settings)
    started = time.monotonic()
    server.start()
    try:
        server.wait_announced(timeout)
        with SyncJobClient(server.address("job")) as client:
            first = _until_answered(client, queued_id, started, timeout)
            return first, _until_answered(client, done_id, started, timeout)
    finally:
        server.terminate(timeout=30)


def restart(queued: int, completed: int) -> Restart:
    with tempfile.TemporaryDirectory(prefix="jobgate-bench-restart-") as workdir:
        directory = Path(workdir) / "data"
        started = time.monotonic()
        queued_id, done_id, per_queued = asyncio.run(fill(directory, queued, completed))
        filled = time.monotonic() - started
        size = _directory_bytes(directory)
        first, finished = time_to_answers(directory, queued_id, done_id)
        return Restart(queued, completed, filled, per_queued, size, first, finished)


def throughput_lines(sitting: Sitting, sizes: Sizes, repeats: int, fsyncs: float) -> list[str]:
    rows = []
    for producer in [name for name, _, _ in producers(sizes)] + [DRAIN]:
        memory = sitting.rate("in memory", producer)
        cells = [sitting.rates(mode, producer) for mode in MODES]
        ratios = []
        for mode, bound in BOUNDS.items():
            ratio = sitting.rate(mode, producer) / memory
            ratios.append(f"{ratio:.2f} ({'within' if ratio >= bound else '**UNDER**'})")
        cpu = " / ".join(f"{sitting.cpu_ms(mode, producer):.2f}" for mode in MODES)
        rows.append([producer, *cells, *ratios, cpu])
    header = ["producer", *(f"{mode} jobs/s" for mode in MODES),
              f"normal / in memory (bound {BOUNDS['normal']})",
              f"full / in memory (bound {BOUNDS['full']})",
              "serve CPU ms per job, in memory / normal / full"]  # fmt: skip
    return [f"## 18. The durable embedded store against the in-memory one (end to end, worker "
            f"concurrency 8; {repeats} runs of each, interleaved, in one sitting)", "",
            *table(header, rows), "",
            "Each run is a fresh `jobgate serve` (bench/durable.py): without `--data-dir`, "
            "or with a fresh one and `--data-sync normal` or `full`; the runs alternate "
            "in memory, normal, full, full, normal, in memory, ... The producers are section "
            "1's; the drain queues its jobs first, then starts the worker. Ratios compare "
            "medians.", "",
            f"The disk's own fsyncs, measured alone (4 KiB write + fsync, one file): "
            f"**{fsyncs:.0f} per second**. Under `full` each commit costs one fsync of the "
            "WAL; concurrent transitions share a commit, so the producers with more in "
            "flight pay less of it per job.", ""]  # fmt: skip


def restart_lines(rows: list[Restart]) -> list[str]:
    body = [[f"{row.queued:,}", f"{row.completed:,}", f"{row.directory_bytes / 2**20:.0f}",
             f"{row.bytes_per_queued_job:.0f}", f"{row.fill_seconds:.0f}", f"{row.seconds:.2f}",
             "within" if row.seconds < RESTART_BOUND else "**OVER**",
             f"{row.finished_seconds:.2f}"]
            for row in rows]  # fmt: skip
    header = ["QUEUED jobs", "COMPLETED jobs", "directory MiB", "bytes on disk per queued job",
              "fill s", "restart to first Get s", f"bound {RESTART_BOUND:.0f} s",
              "restart to a COMPLETED job's Get s"]  # fmt: skip
    return ["## 19. Restart of the durable embedded store, and bytes on disk (1 KiB payloads)",
            "", *table(header, body), "",
            "The directory is filled through the store itself (bench/durable.py `fill`): the "
            "queued jobs first (the directory's size then, over their number, is bytes per "
            "queued job: row, payload, audit event and SQLite's pages), then the completed "
            "ones, submitted, claimed and given a result. The restart time runs from starting "
            "the `serve` process (Python's start-up included) to the first Get it answers, "
            "of a queued job; serve loads the live records first and answers on them, then "
            "merges the finished ones behind (docs/durable-store.md, \"A start in two "
            "steps\"): the last column is the first answered Get of a completed job, which "
            "waits for that. No full integrity check is made.", ""]  # fmt: skip
