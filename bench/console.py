"""The web console's cost (issue 23): the Jobs page with the jobs held, and live job pages.

Deployment, each a process as an operator runs it: a private redis-server
without persistence, `jobgate gateway` on it with an --auth-file (an admin
token and a client token of tenant "default"), and `jobgate console
--token-file <the admin token>` in front of it on loopback.

Fill: bench/listing.py's Filler, the store's own submit script pipelined
(tenant "default", four models in turn), then 90 % of the jobs ended on the
store in its mix (70 % COMPLETED, 20 % FAILED, 10 % left QUEUED).

Pages: GET /jobs (no filter, 50 a page: one ListJobs with the admin token),
its "Older »" page (one ListJobs from the first page's token) and /failed
(two ListJobs walks merged), over one keep-alive HTTP/1.1 connection on
loopback, timed at the client from the request's first byte to the body's
last. That is the console's whole time on the server plus one loopback
round trip: an upper bound of the server's time. Beside them, ListJobs
alone (the same first page from the gateway, admin token), so the
difference is the console's own share (a template render, HTTP).

Live pages: `pages` job pages (`/jobs/<id>/events`, server-sent events) over
`jobs` distinct QUEUED jobs, opened one after another on their own
connections; a page counts once its first `event: job` arrived. StreamStatus
calls are read from the gateway's own gRPC metrics (grpc_server_started_total
and grpc_server_handled_total for StreamStatus): started while the pages
opened, and open while they are. Then the jobs are cancelled (admin Cancel)
and every page must see its `event: end`; the time from the first cancel to
the last end, and the calls still open after.
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.listing import MIX, Filler
from bench.procstat import cpu_seconds, rss_and_threads
from bench.report import ms, percentile, table
from bench.servers import COMMON_SETTINGS, stop_process
from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from tests.launcher import REPO_ROOT, JobgateServer, server_environment
from tests.redis_server import RedisServer

ADMIN_TOKEN = "bench-console-admin"
CLIENT_TOKEN = "bench-console-default"
LIVE_MODEL = "bench-console-live"
PAGE_ROWS = 50
WARMUP_REQUESTS = 10
START_TIMEOUT = 30.0
READ_TIMEOUT = 60.0
_SERVING = re.compile(r"jobgate console: serving (http://\S+)")
_OLDER = re.compile(r'href="(/jobs\?[^"]*page_token=[^"]*)"')
_ROW = b'<a class="id" href="/jobs/'


@dataclass(frozen=True)
class PageRow:
    label: str
    calls: str  # what the page costs at the gateway
    samples: list[float]


@dataclass(frozen=True)
class LiveRow:
    pages: int
    jobs: int
    open_seconds: float  # opening every page, each to its first snapshot
    started_calls: int  # StreamStatus calls the gateway started meanwhile
    open_calls: int  # StreamStatus calls open while the pages are
    end_seconds: float  # first cancel -> every page's `event: end`
    open_after: int  # StreamStatus calls open once every page ended
    console_rss: tuple[int, int]  # bytes before the pages, while they are open
    console_cpu: float  # CPU seconds the console spent on the whole live part


@dataclass(frozen=True)
class ConsoleFigures:
    jobs: int
    fill_rate: float
    requests: int
    pages: list[PageRow]
    live: LiveRow


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _write_auth(path: Path) -> None:
    tokens = [
        {"sha256": _sha256(ADMIN_TOKEN), "tenant": "ops", "role": "admin"},
        {"sha256": _sha256(CLIENT_TOKEN), "tenant": "default", "role": "client"},
    ]
    path.write_text(json.dumps({"tokens": tokens}))


@dataclass(frozen=True)
class Deployment:
    redis: RedisServer
    gateway: JobgateServer
    console_url: str
    console_pid: int


@contextmanager
def deployment() -> Iterator[Deployment]:
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobgate-bench-")))
        redis = RedisServer(workdir)
        redis.start()
        stack.callback(redis.stop)
        _write_auth(workdir / "auth.json")
        settings = {**COMMON_SETTINGS, "redis-url": redis.url,
                    "auth-file": str(workdir / "auth.json")}  # fmt: skip
        gateway = JobgateServer("gateway", workdir / "gateway.log", settings)
        gateway.start()
        stack.callback(gateway.terminate, 15)
        gateway.wait_serving(timeout=START_TIMEOUT)
        (workdir / "admin.token").write_text(ADMIN_TOKEN + "\n")
        console = subprocess.Popen(
            [sys.executable, "-m", "jobgate.cli", "console", "--target", gateway.target,
             "--listen", "127.0.0.1:0", "--token-file", str(workdir / "admin.token")],
            stdout=subprocess.PIPE, stderr=(workdir / "console.log").open("wb"),
            env=server_environment(), cwd=REPO_ROOT, text=True,
        )  # fmt: skip
        stack.callback(stop_process, console)
        assert console.stdout is not None
        line = console.stdout.readline()
        found = _SERVING.search(line)
        if found is None:
            log = (workdir / "console.log").read_text(errors="replace")
            raise RuntimeError(f"jobgate console did not start: {line!r}\n{log[-3000:]}")
        yield Deployment(redis, gateway, found[1], console.pid)


# -- HTTP/1.1 on loopback, by hand: the client's share of each sample stays small


class Http:
    """One keep-alive HTTP/1.1 connection to the console."""

    def __init__(self, url: str) -> None:
        self.host, port = url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.cookie = ""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Http:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def send(self, path: str) -> None:
        assert self.writer is not None
        cookie = f"Cookie: {self.cookie}\r\n" if self.cookie else ""
        request = f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{cookie}\r\n"
        self.writer.write(request.encode())
        await self.writer.drain()

    async def head(self) -> dict[str, str]:
        assert self.reader is not None
        raw = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
        status, *lines = raw.decode("latin-1").split("\r\n")
        if " 200 " not in status + " ":
            raise RuntimeError(f"the console answered {status!r}")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "set-cookie" in headers:
            self.cookie = headers["set-cookie"].split(";", 1)[0]
        return headers

    async def get(self, path: str) -> bytes:
        await self.send(path)
        headers = await self.head()
        assert self.reader is not None
        if "content-length" in headers:
            return await self.reader.readexactly(int(headers["content-length"]))
        body = b""
        while True:  # chunked
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                return body
            body += chunk[:-2]

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


async def _timed_pages(http: Http, path: str, requests: int, rows: int) -> list[float]:
    for _ in range(WARMUP_REQUESTS):
        await http.get(path)
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        body = await http.get(path)
        samples.append(time.perf_counter() - started)
        if rows and body.count(_ROW) != rows:
            raise RuntimeError(f"{path}: {body.count(_ROW)} rows, not {rows}")
    return samples


async def _timed_list_jobs(target: str, requests: int) -> list[float]:
    metadata = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
    request = job_service_pb2.ListJobsRequest(page_size=PAGE_ROWS)
    async with grpc.aio.insecure_channel(target) as channel:
        jobs = job_service_pb2_grpc.JobServiceStub(channel)
        samples = []
        for index in range(WARMUP_REQUESTS + requests):
            started = time.perf_counter()
            answer = await jobs.ListJobs(request, metadata=metadata)
            if index >= WARMUP_REQUESTS:
                samples.append(time.perf_counter() - started)
            if len(answer.jobs) != PAGE_ROWS:
                raise RuntimeError(f"ListJobs answered {len(answer.jobs)} jobs")
        return samples


async def measure_pages(place: Deployment, requests: int) -> list[PageRow]:
    http = await Http(place.console_url).open()
    try:
        first = await http.get("/jobs")
        older = _OLDER.search(first.decode())
        if older is None:
            raise RuntimeError("the Jobs page has no 'Older' link")
        older_path = html.unescape(older[1])
        rows = [
            PageRow("/jobs (no filter)", "1 ListJobs",
                    await _timed_pages(http, "/jobs", requests, PAGE_ROWS)),
            PageRow("/jobs, its \"Older »\" page", "1 ListJobs (page token)",
                    await _timed_pages(http, older_path, requests, PAGE_ROWS)),
            PageRow("/failed (FAILED and PARTIAL merged)", "2 ListJobs",
                    await _timed_pages(http, "/failed", requests, PAGE_ROWS)),
        ]  # fmt: skip
    finally:
        await http.close()
    rows.append(PageRow("ListJobs alone, gRPC (no console)", "1 ListJobs",
                        await _timed_list_jobs(place.gateway.target, requests)))  # fmt: skip
    return rows


# -- live pages


def _stream_calls(metrics: str) -> tuple[int, int]:
    """(started, handled) StreamStatus calls, from the gateway's /metrics."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as response:
        text = response.read().decode()
    started = handled = 0.0
    for line in text.splitlines():
        if 'grpc_method="StreamStatus"' not in line or line.startswith("#"):
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith("grpc_server_started_total{"):
            started += value
        elif line.startswith("grpc_server_handled_total{"):
            handled += value
    return int(started), int(handled)


async def _wait_for(http: Http, event: bytes, seen: bytearray) -> None:
    assert http.reader is not None
    while event not in seen:
        chunk = await asyncio.wait_for(http.reader.read(65536), READ_TIMEOUT)
        if not chunk:
            raise RuntimeError(f"an event stream closed before {event!r}")
        seen += chunk


async def measure_live(place: Deployment, pages: int, distinct: int) -> LiveRow:
    metrics = place.gateway.address("metrics")
    client = (("authorization", f"Bearer {CLIENT_TOKEN}"),)
    admin = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
    async with grpc.aio.insecure_channel(place.gateway.target) as channel:
        jobs = job_service_pb2_grpc.JobServiceStub(channel)
        job_ids = []
        for _ in range(distinct):
            request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=LIVE_MODEL))
            job_ids.append((await jobs.Submit(request, metadata=client)).job.id)
        cookie = await Http(place.console_url).open()
        await cookie.get("/jobs")  # one browser: its session for every page
        await cookie.close()
        rss_before = rss_and_threads(place.console_pid)[0]
        cpu_before = cpu_seconds(place.console_pid)
        started_before, handled_before = _stream_calls(metrics)
        streams: list[tuple[Http, bytearray]] = []
        opened = time.perf_counter()
        for index in range(pages):
            http = Http(place.console_url)
            http.cookie = cookie.cookie
            await http.open()
            await http.send(f"/jobs/{job_ids[index % distinct]}/events")
            await http.head()
            seen = bytearray()
            await _wait_for(http, b"event: job", seen)
            streams.append((http, seen))
        open_seconds = time.perf_counter() - opened
        started, handled = _stream_calls(metrics)
        rss_open = rss_and_threads(place.console_pid)[0]
        cancelled = time.perf_counter()
        for job_id in job_ids:
            await jobs.Cancel(job_service_pb2.CancelRequest(job_id=job_id), metadata=admin)
        await asyncio.gather(*(_wait_for(http, b"event: end", seen) for http, seen in streams))
        end_seconds = time.perf_counter() - cancelled
        for http, _ in streams:
            await http.close()
        deadline = time.monotonic() + READ_TIMEOUT
        while True:  # the console ends each call as its job ends; the metric follows
            started_after, handled_after = _stream_calls(metrics)
            if started_after == handled_after or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
    return LiveRow(
        pages=pages,
        jobs=distinct,
        open_seconds=open_seconds,
        started_calls=started - started_before,
        open_calls=(started - handled) - (started_before - handled_before),
        end_seconds=end_seconds,
        open_after=started_after - handled_after,
        console_rss=(rss_before, rss_open),
        console_cpu=cpu_seconds(place.console_pid) - cpu_before,
    )


async def _fill(place: Deployment, jobs: int) -> float:
    filler = Filler(place.redis.url)
    await filler.open()
    try:
        started = time.monotonic()
        await filler.submit(jobs)
        await filler.end(jobs * 9 // 10)
        return jobs / max(1e-9, time.monotonic() - started)
    finally:
        await filler.close()


def console_figures(jobs: int, requests: int, pages: int, distinct: int) -> ConsoleFigures:
    with deployment() as place:
        rate = asyncio.run(_fill(place, jobs))
        rows = asyncio.run(measure_pages(place, requests))
        live = asyncio.run(measure_live(place, pages, distinct))
    return ConsoleFigures(jobs, rate, requests, rows, live)


def console_lines(figures: ConsoleFigures) -> list[str]:
    def p50_p99_max(samples: list[float]) -> list[str]:
        return [ms(percentile(samples, 0.5)), ms(percentile(samples, 0.99)), ms(max(samples))]

    page_cells = [[row.label, row.calls, *p50_p99_max(row.samples)] for row in figures.pages]
    live = figures.live
    mib = 1024 * 1024
    live_cells = [[
        f"{live.pages} pages over {live.jobs} jobs",
        f"{live.open_seconds:.2f}",
        str(live.started_calls),
        str(live.open_calls),
        f"{live.end_seconds * 1000:.0f}",
        str(live.open_after),
        f"{live.console_rss[0] / mib:.1f} -> {live.console_rss[1] / mib:.1f}",
        f"{live.console_cpu:.2f}",
    ]]  # fmt: skip
    return [
        f"## 17. The web console (jobgate console in front of jobgate gateway on Redis, no "
        f"persistence, admin token; {figures.jobs:,} jobs held, {figures.requests} requests "
        "each)", "",
        *table(["page", "at the gateway", "p50 ms", "p99 ms", "max ms"], page_cells), "",
        f"Filled through the store's scripts at {figures.fill_rate:,.0f} jobs/s (bench/"
        f"listing.py's Filler; mix: {MIX}). Each page timed at the client over one "
        "keep-alive loopback connection (request's first byte to the body's last, "
        f"{WARMUP_REQUESTS} warm-up requests first): the console's server time plus a loopback "
        "round trip. The issue's bound is 300 ms for the Jobs page.", "",
        "### Live job pages and the StreamStatus calls they hold (the gateway's gRPC metrics)",
        "",
        *table(["pages", "open all, s", "StreamStatus started", "open while the pages are",
                "cancel -> every page's end, ms", "open after", "console RSS MiB",
                "console CPU s"], live_cells), "",
        "Pages opened one after another, each on its own connection, each counted once its "
        "first snapshot arrived; then the jobs cancelled one after another (admin Cancel). "
        "The issue's bound is one StreamStatus per distinct job.", "",
    ]  # fmt: skip
