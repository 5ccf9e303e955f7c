"""The console in a real browser: what an operator sees and does.

Each test drives headless Chromium against a served console in front of a
real `jobgate serve` the test starts (the `gateway` fixture of
tests/console/browser/conftest.py), moving jobs as clients and workers do.
The screenshots in docs/console/ come from these tests.
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Dialog, Page, expect

from jobgate.console.settings import AuthMode
from jobgate.v1 import job_pb2
from tests.console.conftest import LiveFactory, settings_for
from tests.console.serve_gateway import ServeGateway

S = job_pb2


def populate(gateway: ServeGateway) -> dict[str, str]:
    """A day's worth of jobs of every kind and status, two tenants, a few workers.

    In an order where each job a worker claims is the next of its model
    (a real claim takes the next one, not a named one).
    """
    made: dict[str, str] = {}
    done = gateway.create("acme", "summarize", labels={"team": "nlp"}).id
    gateway.claim(done, "gpu-a-01")
    gateway.finish(done, result=b'{"words": 1204}', content_type="application/json")
    made["failed"] = gateway.create(
        "acme",
        "summarize",
        labels={"team": "nlp"},
        status=S.JOB_STATUS_FAILED,
        error_code="HANDLER_ERROR",
        error_message="CUDA out of memory",
        worker_id="gpu-a-02",
    ).id
    gateway.create("globex", "embed", labels={"customer": "globex"}, children=3,
                   status=S.JOB_STATUS_PARTIAL, error_code="SHARD_MISSING",
                   priority=S.PRIORITY_INTERACTIVE, pool="onprem",
                   worker_id="onprem-01")  # fmt: skip
    gateway.create("globex", "embed", status=S.JOB_STATUS_FAILED, error_code="RUN_TIMEOUT",
                   error_message="no answer in 600 s", priority=S.PRIORITY_INTERACTIVE,
                   pool="onprem", worker_id="onprem-01")  # fmt: skip
    gateway.create("globex", "embed", labels={"customer": "globex"},
                   priority=S.PRIORITY_INTERACTIVE, pool="onprem")  # fmt: skip
    group = gateway.create(
        "acme", "text-stats", children=4, max_parallel=2, labels={"batch": "nightly"}
    )
    first, second = group.children[0].id, group.children[1].id
    gateway.claim(first, "gpu-a-01")
    gateway.claim(second, "gpu-a-02")
    gateway.finish(first, result=b"ok")
    gateway.report(second, 0.4, "tokenizing")
    made["group"] = group.id
    running = gateway.create(
        "acme", "summarize", priority=S.PRIORITY_SYSTEM, labels={"team": "search"}
    ).id
    gateway.claim(running, "gpu-b-01")
    gateway.report(running, 0.62, "decoding")
    made["running"] = running
    for index in range(4):
        gateway.create("acme", "text-stats", labels={"team": "nlp", "run": f"r{index}"})
    made["queued"] = gateway.create("acme", "text-stats", labels={"team": "nlp"}).id
    return made


def row_ids(page: Page) -> list[str]:
    return page.locator("table.jobs a.id").all_inner_texts()


def accept_dialogs(page: Page) -> list[str]:
    said: list[str] = []

    def answer(dialog: Dialog) -> None:
        said.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    return said


def test_every_page_loads_without_console_errors(
    page: Page, gateway: ServeGateway, live_console: LiveFactory, shots: Path
) -> None:
    made = populate(gateway)
    console = live_console()
    page.goto(console.url + "/")
    expect(page).to_have_url(console.url + "/jobs")
    listed = gateway.list_ids()
    expect(page.locator("table.jobs tbody tr")).to_have_count(len(listed))
    assert row_ids(page) == listed
    page.screenshot(path=shots / "jobs.png", full_page=True)

    page.goto(f"{console.url}/jobs/{made['running']}")
    expect(page.locator("[data-live-state]")).to_have_text("live")
    page.screenshot(path=shots / "job.png", full_page=True)

    page.goto(f"{console.url}/jobs/{made['group']}")
    expect(page.locator("tr[data-child]")).to_have_count(4)
    expect(page.locator("[data-live-state]")).to_have_text("live")
    page.screenshot(path=shots / "group.png", full_page=True)

    for path, name in (("/failed", "failed"), ("/queues", "queues"), ("/workers", "workers")):
        page.goto(console.url + path)
        expect(page.locator("h1")).to_be_visible()
        expect(page.locator(".problem")).to_have_count(0)
        page.screenshot(path=shots / f"{name}.png", full_page=True)


def test_a_filter_narrows_the_list(
    page: Page, gateway: ServeGateway, live_console: LiveFactory
) -> None:
    populate(gateway)
    console = live_console()
    page.goto(console.url + "/jobs")
    page.get_by_label("Filter").fill("model = summarize AND status = FAILED")
    page.get_by_label("Filter").press("Enter")
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator("table.jobs .status")).to_have_text("FAILED")
    page.get_by_role("link", name="processing", exact=True).click()
    expect(page.get_by_label("Filter")).to_have_value("model = summarize AND status = PROCESSING")
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)


def test_paging_walks_the_list(
    page: Page, gateway: ServeGateway, live_console: LiveFactory
) -> None:
    made = gateway.create_many(7, "acme", "text-stats")
    console = live_console()
    page.goto(console.url + "/jobs?page_size=3")
    seen = row_ids(page)
    for _ in range(2):
        page.get_by_role("link", name="Older »").click()
        expect(page.get_by_role("link", name="« Newest")).to_be_visible()
        seen += row_ids(page)
    expect(page.get_by_role("link", name="Older »")).to_have_count(0)
    assert seen == gateway.newest_first(made)


def test_a_job_goes_queued_processing_completed_without_a_reload(
    page: Page, gateway: ServeGateway, live_console: LiveFactory
) -> None:
    job = gateway.create("acme", "text-stats").id
    console = live_console()
    page.goto(f"{console.url}/jobs/{job}")
    page.evaluate("window.__same_page = true")
    badge = page.locator(".job-head .status")
    expect(badge).to_have_text("QUEUED")
    expect(page.locator("[data-live-state]")).to_have_text("live")
    gateway.claim(job, "gpu-a-07")
    expect(badge).to_have_text("PROCESSING")
    gateway.report(job, 0.5, "halfway")
    expect(page.locator(".progress-row [data-field=progress_text]")).to_have_text("50%")
    expect(page.locator(".progress-row [data-field=stage]")).to_have_text("halfway")
    gateway.finish(job, result=b"42 words")
    expect(badge).to_have_text("COMPLETED")
    expect(page.locator("[data-result]")).to_have_text("42 words")
    expect(page.locator("[data-live-state]")).to_have_text("ended")
    expect(page.get_by_role("button", name="Cancel job")).to_be_hidden()
    assert page.evaluate("window.__same_page") is True


def test_cancel_and_retry_work_after_a_confirmation(
    page: Page, gateway: ServeGateway, live_console: LiveFactory
) -> None:
    job = gateway.create("acme", "text-stats").id
    console = live_console()
    page.goto(f"{console.url}/jobs/{job}")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator(".job-head .status")).to_have_text("QUEUED")
    assert gateway.status(job) == S.JOB_STATUS_QUEUED

    said = accept_dialogs(page)
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator(".notice")).to_have_text("Cancelled.")
    expect(page.locator(".job-head .status")).to_have_text("CANCELLED")
    page.get_by_role("button", name="Retry job").click()
    expect(page.locator(".notice")).to_have_text("Queued again.")
    expect(page.locator(".job-head .status")).to_have_text("QUEUED")
    assert said == [f"Cancel job {job}?", f"Retry job {job}?"]
    assert gateway.status(job) == S.JOB_STATUS_QUEUED


def test_bulk_retry_shows_its_progress(
    page: Page, gateway: ServeGateway, live_console: LiveFactory, shots: Path
) -> None:
    failed = [gateway.create("acme", "m", status=S.JOB_STATUS_FAILED).id for _ in range(5)]
    gateway.create("acme", "m", children=2, status=S.JOB_STATUS_COMPLETED)
    console = live_console()
    page.goto(console.url + "/failed")
    accept_dialogs(page)
    page.get_by_role("button", name="Retry these 5 jobs").click()
    expect(page.locator("[data-bulk=state]")).to_have_text("finished")
    expect(page.locator("[data-bulk=done]")).to_have_text("5")
    expect(page.locator("[data-bulk=retried]")).to_have_text("5")
    page.screenshot(path=shots / "bulk-retry.png", full_page=True)
    assert all(gateway.status(job_id) == S.JOB_STATUS_QUEUED for job_id in failed)


def test_read_only_mode_has_no_action(
    page: Page, gateway: ServeGateway, live_console: LiveFactory
) -> None:
    made = populate(gateway)
    console = live_console(read_only=True)
    for path in (f"/jobs/{made['queued']}", f"/jobs/{made['failed']}", "/failed"):
        page.goto(console.url + path)
        expect(page.locator(".tag")).to_have_text("read-only")
        expect(page.locator("form[method=post]")).to_have_count(0)
        # The one button left anywhere is the filter box's, on /failed.
        expect(page.get_by_role("button")).to_have_count(1 if path == "/failed" else 0)


def test_a_client_token_sees_its_tenant_only(
    page: Page, gateway: ServeGateway, live_console: LiveFactory, shots: Path
) -> None:
    populate(gateway)
    console = live_console(settings_for(gateway, None, auth=AuthMode.TOKEN))
    page.goto(console.url + "/jobs")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fjobs$"))
    page.screenshot(path=shots / "login.png")
    page.get_by_label("JobService token").fill("globex-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(console.url + "/jobs")
    tenants = page.locator("table.jobs tbody td:nth-child(7)").all_inner_texts()
    assert tenants and set(tenants) == {"globex"}
    page.goto(console.url + "/queues")
    expect(page.locator(".problem")).to_contain_text("This page needs an admin token")
    page.screenshot(path=shots / "queues-client-token.png")
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile("/login"))


def test_serves_own_console_asks_for_a_sign_in_and_scopes_to_the_token(
    page: Page, tmp_path: Path
) -> None:
    # `jobgate serve --console-listen` with --auth-file: the console in the
    # serve process, which needs a login and then calls with that token.
    served = ServeGateway(tmp_path, console=True).start()
    try:
        mine = served.create("acme", "text-stats", labels={"team": "nlp"}).id
        served.create("globex", "embed")
        page.goto(served.console_url + "/jobs")
        expect(page).to_have_url(re.compile(r"/login\?next=%2Fjobs$"))
        page.get_by_label("JobService token").fill("acme-token")
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(served.console_url + "/jobs")
        assert row_ids(page) == [mine]
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile("/login"))
    finally:
        page.close()  # before serve stops, so no reconnect is logged as an error
        served.stop()


def test_a_label_holding_a_script_is_shown_as_text(
    page: Page, gateway: ServeGateway, live_console: LiveFactory
) -> None:
    hostile = "<script>alert('label')</script>"
    job = gateway.create("acme", "text-stats", labels={"note": hostile}).id
    dialogs = accept_dialogs(page)
    console = live_console()
    for path in ("/jobs", f"/jobs/{job}"):
        page.goto(console.url + path)
        expect(page.locator(".chip .v").first).to_have_text(hostile)
    assert dialogs == []


def test_the_queues_page_refreshes_itself(
    page: Page, gateway: ServeGateway, live_console: LiveFactory
) -> None:
    gateway.create("acme", "text-stats")
    console = live_console()
    page.goto(console.url + "/queues")
    queued = page.locator("table.queues td.num").first
    expect(queued).to_have_text("1")
    gateway.create("acme", "text-stats")
    expect(queued).to_have_text("2", timeout=15_000)
