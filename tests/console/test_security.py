"""Security: sign-in, sessions, CSRF, read-only, escaping, headers, loopback hosts."""

from __future__ import annotations

import re

import httpx2
import pytest
from starlette.testclient import TestClient

from jobgate.console.sessions import COOKIE
from jobgate.console.settings import AuthMode
from jobgate.v1 import job_pb2
from tests.console.conftest import PASSWORD, ConsoleFactory, password_settings, settings_for
from tests.console.fake_gateway import FakeGatewayThread

CSRF = re.compile(r'name="csrf(?:-token)?" (?:value|content)="([^"]+)"')


def csrf_of(client: TestClient, path: str = "/jobs") -> str:
    found = CSRF.search(client.get(path).text)
    assert found, f"no form token on {path}"
    return found.group(1)


def sign_in(client: TestClient, user: str = "ada", password: str = PASSWORD) -> None:
    answer = client.post(
        "/login",
        data={"csrf": csrf_of(client, "/login"), "user": user, "password": password},
    )
    assert answer.status_code == 303, answer.text


# ---------------------------------------------------------------- escaping and headers


def test_a_label_holding_a_script_is_shown_as_text(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m", labels={"<b>k": "<script>alert(1)</script>"})
    client = console()
    for path in ("/jobs", f"/jobs/{job.id}"):
        text = client.get(path).text
        assert "<script>alert(1)</script>" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        assert "&lt;b&gt;k" in text


def test_a_hostile_error_message_is_escaped_on_the_job_page(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m")
    gateway.finish(job.id, job_pb2.JOB_STATUS_FAILED, error_message='"><img src=x onerror=1>')
    text = console().get(f"/jobs/{job.id}").text
    assert "<img src=x" not in text
    assert "&#34;&gt;&lt;img src=x onerror=1&gt;" in text


def test_every_page_forbids_inline_script_and_framing(console: ConsoleFactory) -> None:
    headers = console().get("/jobs").headers
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert headers["x-content-type-options"] == "nosniff"


def test_without_a_login_only_loopback_host_names_are_answered(console: ConsoleFactory) -> None:
    client = console()
    assert client.get("/jobs", headers={"host": "evil.example:8080"}).status_code == 421
    assert client.get("/jobs", headers={"host": "localhost:8080"}).status_code == 200
    assert client.get("/jobs", headers={"host": "[::1]:8080"}).status_code == 200


def test_with_a_login_any_host_name_is_answered(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    client = console(password_settings(gateway))
    assert client.get("/login", headers={"host": "console.example"}).status_code == 200


# ---------------------------------------------------------------- cookies


def cookie_header(client: TestClient) -> str:
    return client.get("/jobs").headers["set-cookie"]


def test_the_session_cookie_is_http_only_strict_and_expires(console: ConsoleFactory) -> None:
    header = cookie_header(console())
    assert header.startswith(f"{COOKIE}=")
    assert "HttpOnly" in header and "SameSite=Strict" in header
    assert "Max-Age=28800" in header
    assert "Secure" not in header


def test_the_session_cookie_is_secure_behind_a_tls_proxy(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    assert "Secure" in cookie_header(console(behind_tls_proxy=True))


def test_a_known_session_is_not_set_again(console: ConsoleFactory) -> None:
    client = console()
    client.get("/jobs")
    assert "set-cookie" not in client.get("/jobs").headers


# ---------------------------------------------------------------- CSRF


def test_an_action_without_the_form_token_changes_nothing(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m")
    client = console()
    client.get("/jobs")
    answer = client.post(f"/jobs/{job.id}/cancel", data={"reason": "no token"})
    assert answer.status_code == 403
    assert gateway.status(job.id) == job_pb2.JOB_STATUS_QUEUED


def test_an_action_with_another_sessions_token_changes_nothing(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m")
    theirs = csrf_of(console())
    client = console()
    client.get("/jobs")
    answer = client.post(f"/jobs/{job.id}/cancel", data={"csrf": theirs})
    assert answer.status_code == 403
    assert gateway.status(job.id) == job_pb2.JOB_STATUS_QUEUED


def test_an_action_must_be_a_form_post(console: ConsoleFactory, gateway: FakeGatewayThread) -> None:
    job = gateway.create("acme", "m")
    client = console()
    token = csrf_of(client)
    assert client.get(f"/jobs/{job.id}/cancel").status_code == 405
    assert client.post(f"/jobs/{job.id}/cancel", json={"csrf": token}).status_code == 415


# ---------------------------------------------------------------- actions


def test_cancel_cancels_and_says_so(console: ConsoleFactory, gateway: FakeGatewayThread) -> None:
    job = gateway.create("acme", "m")
    client = console()
    answer = client.post(f"/jobs/{job.id}/cancel", data={"csrf": csrf_of(client)})
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/jobs/{job.id}?done=cancelled"
    assert gateway.status(job.id) == job_pb2.JOB_STATUS_CANCELLED
    assert "Cancelled." in client.get(answer.headers["location"]).text


def test_retry_queues_a_failed_job_again(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m", status=job_pb2.JOB_STATUS_FAILED)
    client = console()
    answer = client.post(f"/jobs/{job.id}/retry", data={"csrf": csrf_of(client)})
    assert answer.headers["location"] == f"/jobs/{job.id}?done=retried"
    assert gateway.status(job.id) == job_pb2.JOB_STATUS_QUEUED


def test_a_refused_retry_shows_the_job_with_the_reason(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m", status=job_pb2.JOB_STATUS_COMPLETED)
    client = console()
    answer = client.post(f"/jobs/{job.id}/retry", data={"csrf": csrf_of(client)})
    assert answer.status_code == 409
    assert "JOB_NOT_RETRYABLE" in answer.text
    assert job.id in answer.text


def test_the_job_page_offers_cancel_while_live_and_retry_once_failed(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    live = gateway.create("acme", "m")
    failed = gateway.create("acme", "m", status=job_pb2.JOB_STATUS_FAILED)
    client = console()
    live_page, failed_page = (
        client.get(f"/jobs/{live.id}").text,
        client.get(f"/jobs/{failed.id}").text,
    )
    assert re.search(r'data-show-when="cancel">', live_page)
    assert re.search(r'data-show-when="retry" hidden>', live_page)
    assert re.search(r'data-show-when="cancel" hidden>', failed_page)
    assert re.search(r'data-show-when="retry">', failed_page)


def test_bulk_retry_retries_what_the_failed_page_showed(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    failed = [gateway.create("acme", "m", status=job_pb2.JOB_STATUS_FAILED).id for _ in range(3)]
    client = console()
    page = client.get("/failed").text
    shown = re.findall(r'name="job_id" value="([0-9A-Z]{26})"', page)
    assert sorted(shown) == sorted(failed)
    answer = client.post(
        "/failed/retry",
        data={"csrf": CSRF.findall(page)[-1], "job_id": shown},
    )
    assert answer.status_code == 303
    run_page = answer.headers["location"]
    assert run_page.startswith("/failed/retries/")
    events = client.get(run_page + "/events").text  # streams until the run finishes
    assert '"done": 3' in events and '"retried": 3' in events and '"finished": true' in events
    assert all(gateway.status(job_id) == job_pb2.JOB_STATUS_QUEUED for job_id in failed)


def test_a_bulk_retry_is_visible_to_its_own_session_only(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m", status=job_pb2.JOB_STATUS_FAILED)
    client = console()
    answer = client.post("/failed/retry", data={"csrf": csrf_of(client), "job_id": job.id})
    run_page = answer.headers["location"]
    assert client.get(run_page).status_code == 200
    assert console().get(run_page).status_code == 404


# ---------------------------------------------------------------- read-only


def test_read_only_shows_no_action(console: ConsoleFactory, gateway: FakeGatewayThread) -> None:
    live = gateway.create("acme", "m")
    gateway.create("acme", "m", status=job_pb2.JOB_STATUS_FAILED)
    client = console(read_only=True)
    for path in (f"/jobs/{live.id}", "/failed"):
        text = client.get(path).text
        assert 'method="post" action="/jobs' not in text
        assert 'action="/failed/retry"' not in text
        assert "read-only" in text


@pytest.mark.parametrize("action", ["cancel", "retry"])
def test_read_only_refuses_job_actions(
    console: ConsoleFactory, gateway: FakeGatewayThread, action: str
) -> None:
    job = gateway.create("acme", "m", status=job_pb2.JOB_STATUS_FAILED)
    client = console(read_only=True)
    answer = client.post(f"/jobs/{job.id}/{action}", data={"csrf": csrf_of(client)})
    assert answer.status_code == 403
    assert gateway.status(job.id) == job_pb2.JOB_STATUS_FAILED


def test_read_only_refuses_bulk_retry(console: ConsoleFactory, gateway: FakeGatewayThread) -> None:
    job = gateway.create("acme", "m", status=job_pb2.JOB_STATUS_FAILED)
    client = console(read_only=True)
    answer = client.post("/failed/retry", data={"csrf": csrf_of(client), "job_id": job.id})
    assert answer.status_code == 403
    assert gateway.status(job.id) == job_pb2.JOB_STATUS_FAILED


# ---------------------------------------------------------------- password sign-in


def test_with_a_login_pages_lead_to_sign_in(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    answer = console(password_settings(gateway)).get("/jobs?filter=model%20%3D%20m")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/login?next=%2Fjobs%3Ffilter%3Dmodel%2520%253D%2520m"


def test_a_wrong_password_does_not_sign_in(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    client = console(password_settings(gateway))
    answer = client.post(
        "/login", data={"csrf": csrf_of(client, "/login"), "user": "ada", "password": "nope"}
    )
    assert answer.status_code == 401
    assert "Wrong name or password." in answer.text
    assert client.get("/jobs").status_code == 303


def test_an_unknown_user_does_not_sign_in(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    client = console(password_settings(gateway))
    answer = client.post(
        "/login", data={"csrf": csrf_of(client, "/login"), "user": "eve", "password": PASSWORD}
    )
    assert answer.status_code == 401


def test_the_right_password_signs_in_with_a_new_session(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    client = console(password_settings(gateway))
    client.get("/login")
    before = client.cookies[COOKIE]
    sign_in(client)
    assert client.cookies[COOKIE] != before
    page = client.get("/jobs")
    assert page.status_code == 200
    assert '<span class="viewer">ada</span>' in page.text


def test_sign_in_returns_to_the_page_asked_for_but_never_off_site(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    client = console(password_settings(gateway))
    for asked, landed in (("/failed?x=1", "/failed?x=1"), ("//evil.example/", "/jobs")):
        client.cookies.clear()
        answer = client.post(
            "/login",
            data={
                "csrf": csrf_of(client, "/login"),
                "user": "ada",
                "password": PASSWORD,
                "next": asked,
            },
        )
        assert answer.headers["location"] == landed


def test_sign_out_ends_the_session(console: ConsoleFactory, gateway: FakeGatewayThread) -> None:
    client = console(password_settings(gateway))
    sign_in(client)
    answer = client.post("/logout", data={"csrf": csrf_of(client)})
    assert answer.headers["location"] == "/login"
    assert client.get("/jobs").status_code == 303


def test_signed_out_event_streams_are_refused(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    job = gateway.create("acme", "m")
    assert console(password_settings(gateway)).get(f"/jobs/{job.id}/events").status_code == 401


# ---------------------------------------------------------------- token sign-in


def token_sign_in(client: TestClient, token: str) -> httpx2.Response:
    return client.post("/login", data={"csrf": csrf_of(client, "/login"), "token": token})


def test_token_sign_in_calls_with_that_persons_token(
    console: ConsoleFactory, gateway: FakeGatewayThread
) -> None:
    mine = gateway.create("acme", "m")
    theirs = gateway.create("globex", "m")
    # The console's own token is an admin's: a signed-in client must not get its rights.
    client = console(settings_for(gateway, "admin-token", auth=AuthMode.TOKEN))
    assert token_sign_in(client, "acme-token").status_code == 303
    text = client.get("/jobs").text
    assert mine.id in text and theirs.id not in text
    assert client.get(f"/jobs/{theirs.id}").status_code == 404
    assert "This page needs an admin token" in client.get("/queues").text


@pytest.mark.parametrize(
    ("token", "said"),
    [("no-such-token", "unknown token"), ("worker-token", "may not call JobService")],
)
def test_token_sign_in_refuses_what_the_gateway_refuses(
    console: ConsoleFactory, gateway: FakeGatewayThread, token: str, said: str
) -> None:
    client = console(settings_for(gateway, None, auth=AuthMode.TOKEN))
    answer = token_sign_in(client, token)
    assert answer.status_code == 401
    assert said in answer.text


def test_token_sign_in_refuses_a_gateway_that_checks_no_token(
    console: ConsoleFactory,
) -> None:
    open_gateway = FakeGatewayThread(tokens=None).start()
    try:
        client = console(settings_for(open_gateway, None, auth=AuthMode.TOKEN))
        answer = token_sign_in(client, "anything")
        assert answer.status_code == 401
        assert "runs without --auth-file" in answer.text
    finally:
        open_gateway.stop()
