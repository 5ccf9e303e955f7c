"""Live job pages: snapshots pushed over server-sent events, one StreamStatus per job."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx2

from jobgate.console.bulk import BulkRetry
from jobgate.console.events import bulk_stream
from jobgate.v1 import job_pb2
from tests.console.conftest import LiveFactory
from tests.console.fake_gateway import FakeGatewayThread
from tests.helpers import assert_eventually
from tests.pki import Pki

PAGES = 200


async def until(predicate: Callable[[], bool]) -> None:
    async def check() -> bool:
        return predicate()

    await assert_eventually(check)


@dataclass
class Page:
    """One open job page's event stream: the events it has received so far."""

    events: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    closed: bool = False  # the console ended the stream

    def statuses(self) -> list[object]:
        return [data.get("status") for name, data in self.events if name == "job"]


async def follow(client: httpx2.AsyncClient, url: str, page: Page) -> None:
    async with client.stream("GET", url) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        name = ""
        async for line in answer.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                page.events.append((name, json.loads(line.removeprefix("data: "))))
                if name == "end":
                    return
    page.closed = True


@contextlib.asynccontextmanager
async def open_pages(base: str, urls: list[str]) -> AsyncIterator[list[Page]]:
    """Open an event stream per url; closed (as tabs are) on leaving."""
    limits = httpx2.Limits(max_connections=len(urls) + 10)
    async with httpx2.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
        pages = [Page() for _ in urls]
        tasks = [
            asyncio.create_task(follow(client, url, page))
            for url, page in zip(urls, pages, strict=True)
        ]
        try:
            yield pages
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_job_page_receives_each_status_until_the_end(
    live_console: LiveFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "text-stats")
    console = live_console()
    async with open_pages(console.url, [f"/jobs/{job.id}/events"]) as (page,):
        await until(lambda: page.statuses() == ["QUEUED"])
        gateway.claim(job.id)
        await until(lambda: page.statuses()[-1] == "PROCESSING")
        gateway.report(job.id, 0.5, "halfway")
        gateway.finish(job.id, result=b"done")
        await until(lambda: bool(page.events) and page.events[-1][0] == "end")
    last = [data for name, data in page.events if name == "job"][-1]
    assert last["status"] == "COMPLETED" and last["result"] == "done"
    assert last["terminal"] is True and last["can_retry"] is False


async def test_pages_of_one_job_share_one_stream_status_call(
    live_console: LiveFactory, gateway: FakeGatewayThread
) -> None:
    jobs = [gateway.create("acme", "text-stats").id for _ in range(2)]
    console = live_console()
    urls = [f"/jobs/{jobs[i % 2]}/events" for i in range(PAGES)]
    async with open_pages(console.url, urls) as pages:
        await until(lambda: all(page.statuses() for page in pages))
        assert gateway.stream_calls() == 2
        assert gateway.open_streams() == 2
        gateway.claim(jobs[0])
        await until(lambda: all(p.statuses()[-1] == "PROCESSING" for p in pages[::2]))
        assert all(p.statuses() == ["QUEUED"] for p in pages[1::2])
    # Every page closed: the console lets go of both calls.
    await until(lambda: gateway.open_streams() == 0)


async def test_a_page_opened_later_joins_the_stream_with_its_latest_snapshot(
    live_console: LiveFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "text-stats")
    console = live_console()
    url = f"/jobs/{job.id}/events"
    async with open_pages(console.url, [url]) as (first,):
        await until(lambda: bool(first.statuses()))
        gateway.claim(job.id)
        await until(lambda: first.statuses()[-1] == "PROCESSING")
        async with open_pages(console.url, [url]) as (second,):
            await until(lambda: second.statuses() == ["PROCESSING"])
            assert gateway.stream_calls() == 1


def test_pages_of_different_credentials_never_share_a_stream(
    live_console: LiveFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "text-stats")
    console = live_console()
    hub = console.server.console.hub

    async def watch_with_two_tokens() -> int:
        first = hub.subscribe("acme-token", job.id)
        second = hub.subscribe("admin-token", job.id)
        await anext(first)
        await anext(second)
        feeds = hub.open_feeds
        await first.aclose()
        await second.aclose()
        return feeds

    assert console.run(watch_with_two_tokens()) == 2
    assert gateway.stream_calls() == 2


async def test_a_missing_job_ends_its_stream_with_the_problem(
    live_console: LiveFactory, gateway: FakeGatewayThread
) -> None:
    console = live_console()
    async with open_pages(console.url, ["/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/events"]) as (page,):
        await until(lambda: bool(page.events) and page.events[-1][0] == "end")
    assert page.events[0][0] == "problem"
    assert "No such job" in str(page.events[0][1]["message"])


def test_a_terminal_job_page_opens_no_stream(
    live_console: LiveFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m", status=job_pb2.JOB_STATUS_COMPLETED)
    console = live_console()
    page = httpx2.get(f"{console.url}/jobs/{job.id}")
    assert "data-events=" not in page.text


async def test_a_stopping_console_ends_streams_without_end_so_pages_reconnect(
    live_console: LiveFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "text-stats")
    console = live_console()
    async with open_pages(console.url, [f"/jobs/{job.id}/events"]) as (page,):
        await until(lambda: page.statuses() == ["QUEUED"])
        await asyncio.to_thread(console.run, console.server.console.hub.close())
        await until(lambda: page.closed)
    assert [name for name, _ in page.events] == ["job"]


def test_with_tls_the_console_serves_https_and_marks_cookies_secure(
    live_console: LiveFactory, gateway: FakeGatewayThread, pki: Pki
) -> None:
    console = live_console(tls_cert=str(pki.server_cert), tls_key=str(pki.server_key))
    assert console.url.startswith("https://")
    page = httpx2.get(f"{console.url}/jobs", verify=ssl.create_default_context(cafile=pki.ca))
    assert page.status_code == 200
    assert "Secure" in page.headers["set-cookie"]


def test_the_console_listens_on_a_tcp_socket_so_asyncio_sets_nodelay(
    live_console: LiveFactory,
) -> None:
    # asyncio sets TCP_NODELAY on an accepted socket only when the listening one
    # names IPPROTO_TCP; without it a response's head and body, written apart,
    # wait out the client's delayed ACK.
    console = live_console()
    servers = console.server._server.servers
    assert servers and all(
        sock.proto == socket.IPPROTO_TCP for server in servers for sock in server.sockets
    )


async def test_a_bulk_retry_that_finishes_while_its_progress_is_read_ends_on_the_finished_one() -> (
    None
):
    run = BulkRetry("run", "session", ("a", "b"))
    stream = bulk_stream(run)
    assert '"finished": false' in await anext(stream)
    run.retried, run.finished_at = 2, 1.0  # while the reader held the first progress
    run.notify()

    last = await anext(stream)

    assert '"done": 2' in last and '"finished": true' in last
    assert (await anext(stream)).startswith("event: end")
