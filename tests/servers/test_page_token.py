"""ListJobs page tokens: opaque, url-safe, bound to their filter and the caller's scope."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_server.list_filter import parse_filter
from gateway_server.page_token import decode_page_token, encode_page_token
from serving.violations import ValidationError
from store.model import JobFilter, ListCursor

CURSOR = ListCursor(
    datetime(2026, 12, 1, 9, 30, 0, 123456, tzinfo=UTC), "01ARZ3NDEKTSV4RRFFQ69G5FAV"
)
FAILED = parse_filter("status = FAILED")


def refusal(token: str, scope: str | None = "acme", job_filter: JobFilter = FAILED) -> str:
    with pytest.raises(ValidationError) as refused:
        decode_page_token(token, scope, job_filter)
    [violation] = refused.value.violations
    assert violation.field == "page_token"
    return violation.description


def test_a_token_resumes_after_its_cursor() -> None:
    token = encode_page_token(CURSOR, "acme", FAILED)
    assert decode_page_token(token, "acme", FAILED) == CURSOR


def test_a_token_is_url_safe_text() -> None:
    assert re.fullmatch(r"[A-Za-z0-9_-]+", encode_page_token(CURSOR, "acme", FAILED))


def test_no_token_is_the_first_page() -> None:
    assert decode_page_token("", "acme", FAILED) is None


def test_a_token_made_for_another_filter_is_refused() -> None:
    token = encode_page_token(CURSOR, "acme", FAILED)
    assert "another filter or caller" in refusal(token, job_filter=parse_filter("status = QUEUED"))


def test_a_token_made_for_no_filter_is_refused_with_one() -> None:
    token = encode_page_token(CURSOR, "acme", JobFilter())
    assert "another filter or caller" in refusal(token)


def test_a_token_made_for_another_tenant_is_refused() -> None:
    token = encode_page_token(CURSOR, "acme", FAILED)
    assert "another filter or caller" in refusal(token, scope="globex")


def test_an_admins_token_is_refused_to_a_tenant_and_back() -> None:
    admins = encode_page_token(CURSOR, None, FAILED)
    assert "another filter or caller" in refusal(admins, scope="acme")
    tenants = encode_page_token(CURSOR, "acme", FAILED)
    assert "another filter or caller" in refusal(tenants, scope=None)


def test_the_same_filter_spelled_another_way_keeps_its_tokens() -> None:
    token = encode_page_token(CURSOR, "acme", parse_filter("status=failed"))
    assert decode_page_token(token, "acme", parse_filter('status = "FAILED"')) == CURSOR


def _repacked(token: str, change: int, value: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[change] = value
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "token",
    [
        "x",
        "not a token",
        "abc=",
        "é" * 10,
        encode_page_token(CURSOR, "acme", FAILED)[:-4],
        encode_page_token(CURSOR, "acme", FAILED) + "AAAA",
        _repacked(encode_page_token(CURSOR, "acme", FAILED), 0, 2),  # another version
        _repacked(encode_page_token(CURSOR, "acme", FAILED), 9, ord("!")),  # not a job id
        _repacked(encode_page_token(CURSOR, "acme", FAILED), 1, 0x7F),  # beyond year 9999
    ],
)
def test_a_token_that_does_not_decode_is_refused(token: str) -> None:
    assert "does not decode" in refusal(token)


_IDS = st.from_regex(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", fullmatch=True)
_TIMES = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=200, deadline=None)
@given(_TIMES, _IDS, st.one_of(st.none(), st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)))
def test_every_cursor_round_trips(created: datetime, job_id: str, scope: str | None) -> None:
    cursor = ListCursor(created, job_id)
    assert decode_page_token(encode_page_token(cursor, scope, FAILED), scope, FAILED) == cursor


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), st.from_regex(r"[A-Za-z0-9_-]{60,76}", fullmatch=True)))
def test_any_text_decodes_or_is_refused_naming_page_token(token: str) -> None:
    try:
        decode_page_token(token, "acme", FAILED)
    except ValidationError as error:
        assert [v.field for v in error.violations] == ["page_token"]
