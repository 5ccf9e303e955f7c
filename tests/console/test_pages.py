"""The pages: what each shows for what the gateway answers."""

from __future__ import annotations

import re
from html import unescape

from jobgate.console import present
from jobgate.v1 import job_pb2
from tests.console.conftest import ConsoleFactory, settings_for
from tests.console.fake_gateway import FakeGatewayThread

JOB_LINK = re.compile(r'<a class="id" href="/jobs/([0-9A-Z]{26})">')


def listed(html: str) -> list[str]:
    return JOB_LINK.findall(html)


def link(html: str, rel: str) -> str:
    found = re.search(rf'<a href="([^"]+)" rel="{rel}">', html)
    assert found, f"no {rel} link"
    return unescape(found.group(1))


def test_root_leads_to_the_jobs(console: ConsoleFactory) -> None:
    answer = console().get("/")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/jobs"


def test_jobs_are_listed_newest_first(console: ConsoleFactory, gateway: FakeGatewayThread) -> None:
    made = gateway.create_many(3, "acme", "text-stats")
    assert listed(console().get("/jobs").text) == made[::-1]


def test_a_filter_narrows_the_list(console: ConsoleFactory, gateway: FakeGatewayThread) -> None:
    gateway.create_many(2, "acme", "text-stats")
    wanted = gateway.create_many(2, "acme", "summarize")
    page = console().get("/jobs", params={"filter": "model = summarize"})
    assert listed(page.text) == wanted[::-1]


def test_a_filter_the_gateway_refuses_is_said_with_its_reason(console: ConsoleFactory) -> None:
    page = console().get("/jobs", params={"filter": "colour = blue"})
    assert page.status_code == 400
    assert "The gateway refused the request" in page.text
    assert "unknown field" in page.text


def test_the_status_quick_filter_replaces_the_status_term(console: ConsoleFactory) -> None:
    page = console().get("/jobs", params={"filter": "status = QUEUED AND model = m"})
    failed = re.search(r'<a class="chip s-failed" href="([^"]+)">', page.text)
    assert failed is not None
    assert "filter=model+%3D+m+AND+status+%3D+FAILED" in unescape(failed.group(1))


def test_paging_walks_every_job_once_newest_first(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    made = gateway.create_many(7, "acme", "text-stats")
    client = console()
    seen: list[str] = []
    page = client.get("/jobs", params={"page_size": "3"})
    while True:
        seen += listed(page.text)
        if 'rel="next"' not in page.text:
            break
        page = client.get(link(page.text, "next"))
    assert seen == made[::-1]


def test_a_later_page_links_back_to_the_newest(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    gateway.create_many(3, "acme", "text-stats")
    client = console()
    second = client.get(link(client.get("/jobs?page_size=2").text, "next"))
    assert link(second.text, "first") == "/jobs"


def test_a_job_page_shows_every_field(console: ConsoleFactory, gateway: FakeGatewayThread) -> None:
    job = gateway.create("acme", "text-stats", labels={"team": "nlp"}, pool="onprem")
    gateway.claim(job.id, "gpu-7")
    gateway.report(job.id, 0.25, "tokenizing")
    text = console().get(f"/jobs/{job.id}").text
    for shown in (job.id, "acme", "text-stats", "onprem", "gpu-7", "tokenizing", "25%", "team"):
        assert shown in text
    assert '<progress max="1" value="0.25" data-progress>' in text
    assert "PROCESSING" in text


def test_a_group_page_lists_its_children(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    group = gateway.create("acme", "text-stats", children=3, max_parallel=1)
    text = console().get(f"/jobs/{group.id}").text
    rows = re.findall(r'<tr data-child="([0-9A-Z]{26})">', text)
    assert rows == [child.id for child in group.children]
    assert "Children (3)" in text


def test_a_group_shows_no_attempts_of_its_own() -> None:
    group = job_pb2.Job(kind=job_pb2.JOB_KIND_GROUP)
    single = job_pb2.Job(kind=job_pb2.JOB_KIND_SINGLE, attempts=1, max_attempts=3)
    assert present.attempts(group) == "" and present.attempts(single) == "1/3"
    assert present.attempts(single, " of ") == "1 of 3"


def test_a_malformed_job_id_is_not_found_without_a_call(console: ConsoleFactory) -> None:
    assert console().get("/jobs/not-a-job").status_code == 404


def test_an_unknown_job_is_not_found(console: ConsoleFactory) -> None:
    page = console().get("/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert page.status_code == 404
    assert "No such job" in page.text


def test_the_queues_page_counts_queued_and_processing_per_queue(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    first, _ = gateway.create_many(2, "acme", "text-stats")
    gateway.claim(first)
    text = console().get("/queues").text
    row = re.search(
        r"<td>batch</td>\s*<td>any</td>\s*<td class=\"num\">(\d+)</td>\s*"
        r"<td class=\"num\">(\d+)</td>",
        text,
    )
    assert row is not None and row.groups() == ("1", "1")


def test_the_queues_table_alone_is_served_for_its_refresh(console: ConsoleFactory) -> None:
    text = console().get("/queues", params={"partial": "1"}).text
    assert "<html" not in text
    assert "No queued or processing jobs." in text


def test_the_workers_page_shows_pool_models_held_jobs(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "text-stats")
    gateway.claim(job.id, "gpu-3")
    text = console().get("/workers").text
    assert "gpu-3" in text and "default" in text and "text-stats" in text
    assert f'href="/jobs/{job.id}"' in text


def test_queues_and_workers_say_a_client_token_needs_admin(
    console: ConsoleFactory,
) -> None:
    client = console(token="acme-token")
    for path in ("/queues", "/workers"):
        page = client.get(path)
        assert page.status_code == 200
        assert "This page needs an admin token" in page.text


def test_a_client_token_lists_its_own_tenant_only(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    mine = gateway.create_many(2, "acme", "text-stats")
    gateway.create_many(2, "globex", "text-stats")
    assert listed(console(token="acme-token").get("/jobs").text) == mine[::-1]


def test_failed_merges_failed_and_partial_newest_first(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    expected = []
    for index in range(5):
        status = job_pb2.JOB_STATUS_FAILED if index % 2 else job_pb2.JOB_STATUS_PARTIAL
        expected.append(gateway.create("acme", "m", status=status).id)
        gateway.create("acme", "m", status=job_pb2.JOB_STATUS_COMPLETED)
    client = console()
    seen: list[str] = []
    page = client.get("/failed", params={"page_size": "2"})
    while True:
        seen += listed(page.text)
        if 'rel="next"' not in page.text:
            break
        page = client.get(link(page.text, "next"))
    assert seen == expected[::-1]


def test_failed_keeps_a_filter_of_its_own(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    gateway.create("acme", "m", status=job_pb2.JOB_STATUS_FAILED)
    wanted = gateway.create("acme", "n", status=job_pb2.JOB_STATUS_FAILED).id
    assert listed(console().get("/failed", params={"filter": "model = n"}).text) == [wanted]


def test_a_bad_failed_page_token_is_a_bad_request(console: ConsoleFactory) -> None:
    page = console().get("/failed", params={"page_token": "nonsense!"})
    assert page.status_code == 400
    assert "Bad page token" in page.text


def test_a_gateway_without_the_new_rpcs_is_said_to_not_serve_them(
    console: ConsoleFactory,
) -> None:
    old = FakeGatewayThread(unimplemented=True).start()
    try:
        client = console(settings_for(old))
        for path in ("/jobs", "/queues", "/workers", "/failed"):
            page = client.get(path)
            assert page.status_code == 501
            assert "The gateway does not serve this yet" in page.text
    finally:
        old.stop()


def test_a_gateway_that_is_down_is_said_to_be_unavailable(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    client = console()
    gateway.stop()
    page = client.get("/jobs")
    assert page.status_code == 503
    assert "The gateway is unavailable" in page.text
