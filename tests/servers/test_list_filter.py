"""ListJobs' filter grammar (DESIGN "ListJobs"; decisions in docs/list-jobs.md)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_server.list_filter import format_filter, parse_filter
from jobgate.v1.limits import (
    ERROR_CODE_PATTERN,
    MAX_LABEL_KEY_BYTES,
    MAX_LABEL_VALUE_BYTES,
    MAX_QUOTED_INPUT_BYTES,
    MODEL_PATTERN,
)
from serving.auth import TENANT_PATTERN
from serving.violations import ValidationError
from store.model import FilterTerm, FilterValue, JobFilter, JobKind, JobStatus, Priority

ADMIN = {"may_filter_tenant": True}


def terms(text: str, admin: bool = False) -> list[tuple[str, str, object]]:
    parsed = parse_filter(text, may_filter_tenant=admin)
    return [(term.field, term.op, term.value) for term in parsed.terms]


def refusal(text: str, admin: bool = False) -> str:
    """The one violation's description; it must name `filter`."""
    with pytest.raises(ValidationError) as refused:
        parse_filter(text, may_filter_tenant=admin)
    [violation] = refused.value.violations
    assert violation.field == "filter"
    return violation.description


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_an_empty_filter_has_no_terms(text: str) -> None:
    assert parse_filter(text) == JobFilter(())


def test_terms_keep_their_written_order() -> None:
    assert terms("model = m AND status = FAILED AND kind = GROUP") == [
        ("model", "=", "m"),
        ("status", "=", JobStatus.FAILED),
        ("kind", "=", JobKind.GROUP),
    ]


def test_spaces_around_operators_are_optional() -> None:
    assert terms("status=FAILED AND priority= BATCH") == [
        ("status", "=", JobStatus.FAILED),
        ("priority", "=", Priority.BATCH),
    ]


@pytest.mark.parametrize("value", ["FAILED", "failed", "Failed", "JOB_STATUS_FAILED", '"FAILED"'])
def test_an_enum_value_is_its_name_in_any_case_with_or_without_prefix(value: str) -> None:
    assert terms(f"status = {value}") == [("status", "=", JobStatus.FAILED)]


@pytest.mark.parametrize(
    ("text", "value"),
    [("kind = CHILD", JobKind.CHILD), ("priority = PRIORITY_INTERACTIVE", Priority.INTERACTIVE)],
)
def test_kind_and_priority_take_their_enum_names(text: str, value: object) -> None:
    assert terms(text)[0][2] == value


@pytest.mark.parametrize(
    "text", ["status = UNSPECIFIED", "priority = PRIORITY_UNSPECIFIED", "kind = JOB_STATUS_FAILED"]
)
def test_a_name_no_job_can_have_is_refused(text: str) -> None:
    assert "is one of" in refusal(text)


def test_and_must_be_upper_case() -> None:
    assert refusal("status = FAILED and model = m") == (
        "at offset 16 ('and model = m'): AND is written in upper case"
    )


@pytest.mark.parametrize("word", ["OR", "NOT", "or"])
def test_or_and_not_are_refused_by_name(word: str) -> None:
    assert "AND only" in refusal(f"status = FAILED {word} model = m")


def test_an_unknown_field_is_refused_where_it_starts() -> None:
    assert refusal("model = m AND colour = red").startswith("at offset 14 ('colour = red')")


def test_field_names_are_lower_case() -> None:
    assert "expected a field name" in refusal("Status = FAILED")


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "!=", ":"])
def test_fields_other_than_create_time_take_equals_only(op: str) -> None:
    assert refusal(f"model {op} m") == f"at offset 6 ({f'{op} m'!r}): model is compared with = only"


def test_create_time_takes_no_equals() -> None:
    assert "create_time is compared with <, <=, > or >=" in refusal("create_time = 2026-01-01")


def test_a_term_without_an_operator_is_refused() -> None:
    assert "expected an operator after status" in refusal("status FAILED")


def test_a_term_without_a_value_is_refused() -> None:
    assert refusal(
        "status ="
    ) == "at offset 8 (the end): expected a value (quote it if it holds" + (' spaces or =<>()")')


def test_a_dangling_and_is_refused() -> None:
    assert "after AND" in refusal("status = FAILED AND")
    assert "expected a field name" in refusal("status = FAILED AND ")


def test_create_time_takes_one_lower_and_one_upper_bound() -> None:
    text = 'create_time >= 2026-12-01T00:00:00Z AND create_time < "2026-12-02T00:00:00Z"'
    assert terms(text) == [
        ("create_time", ">=", datetime(2026, 12, 1, tzinfo=UTC)),
        ("create_time", "<", datetime(2026, 12, 2, tzinfo=UTC)),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "create_time > 2026-01-01T00:00:00Z AND create_time >= 2026-02-01T00:00:00Z",
        "create_time < 2026-01-01T00:00:00Z AND create_time <= 2026-02-01T00:00:00Z",
    ],
)
def test_two_bounds_on_one_side_are_refused(text: str) -> None:
    assert "bound already" in refusal(text)


@pytest.mark.parametrize(
    "text",
    [
        "status = FAILED AND status = QUEUED",
        "model = a AND model = a",
        "labels.team = a AND labels.team = b",
    ],
)
def test_a_field_given_twice_is_refused_where_it_repeats(text: str) -> None:
    description = refusal(text)
    assert "is given twice" in description
    assert description.startswith(f"at offset {text.index(' AND ') + 5} ")


def test_two_different_label_keys_are_two_fields() -> None:
    assert terms('labels.team = a AND labels."cost centre" = "b c"') == [
        ("labels.team", "=", "a"),
        ("labels.cost centre", "=", "b c"),
    ]


def test_a_tenant_term_from_a_non_admin_is_refused() -> None:
    assert refusal("status = FAILED AND tenant = acme") == (
        "at offset 20 ('tenant = acme'): tenant may be filtered on by admin callers only"
    )


def test_an_admin_may_filter_on_tenant() -> None:
    assert terms("tenant = acme", admin=True) == [("tenant", "=", "acme")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-12-01T01:30:00+01:30", datetime(2026, 12, 1, 0, 0, tzinfo=UTC)),
        ('"2026-11-30T23:00:00-01:00"', datetime(2026, 12, 1, 0, 0, tzinfo=UTC)),
        ("2026-12-01t00:00:00z", datetime(2026, 12, 1, tzinfo=UTC)),
        ('"2026-12-01 00:00:00Z"', datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12-01T00:00:00.123456789Z", datetime(2026, 12, 1, 0, 0, 0, 123456, tzinfo=UTC)),
        ("2026-12-01T00:00:00.5Z", datetime(2026, 12, 1, 0, 0, 0, 500000, tzinfo=UTC)),
    ],
)
def test_create_time_is_an_rfc3339_time_held_in_utc(value: str, expected: datetime) -> None:
    [(_, _, parsed)] = terms(f"create_time > {value}")
    assert parsed == expected
    assert isinstance(parsed, datetime) and parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-01",
        "2026-12-01T00:00:00",
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-12-01T00:00:60Z",
        "2026-12-01T00:00:00+24:00",
        "2026-12-01T00:00:00+01:60",
        "0000-01-01T00:00:00Z",
        "0001-01-01T00:00:00+01:00",
        "\uff12\uff10\uff12\uff16-12-01T00:00:00Z",  # full-width digits
        "yesterday",
    ],
)
def test_a_create_time_that_is_not_rfc3339_is_refused_at_the_value(value: str) -> None:
    assert refusal(f"create_time > {value}").startswith("at offset 14 ")


def test_a_quoted_value_may_hold_escaped_quotes_and_backslashes() -> None:
    assert terms(r'labels.k = "say \"hi\" \\ bye"') == [("labels.k", "=", 'say "hi" \\ bye')]


def test_only_two_escapes_exist() -> None:
    assert "only" in refusal(r'labels.k = "a\nb"')


def test_an_unclosed_quote_is_refused_where_it_opens() -> None:
    assert refusal('model = m AND labels.k = "abc').startswith("at offset 25 ('\"abc')")


@pytest.mark.parametrize(
    "text",
    [
        "model = Llama",
        'model = ""',
        "pool = GPU",
        "parent_id = 123",
        "error_code = oops",
        "labels.k = " + '"' + "v" * 256 + '"',
        'labels."" = v',
        "labels." + "k" * 64 + " = v",
    ],
)
def test_a_value_no_job_can_hold_is_refused(text: str) -> None:
    refusal(text)


def test_pool_may_be_empty_to_find_any_pool_jobs() -> None:
    assert terms('pool = ""') == [("pool", "=", "")]


def test_parent_id_is_upper_cased_as_ulids_ignore_case() -> None:
    assert terms("parent_id = 01arz3ndektsv4rrffq69g5fav") == [
        ("parent_id", "=", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    ]


def test_a_bare_value_stops_at_a_parenthesis() -> None:
    assert "expected AND" in refusal("model = m(x)")


def test_a_refusal_quotes_at_most_128_bytes_of_the_filter() -> None:
    description = refusal("model = m AND " + "é" * 5000)
    quoted = description.split("(", 1)[1].rsplit("):", 1)[0]
    assert len(quoted.encode()) <= MAX_QUOTED_INPUT_BYTES + 8  # the quotes and the "..."


def test_the_canonical_text_spells_every_term_one_way() -> None:
    parsed = parse_filter(
        'status=failed AND labels."a b"=x AND create_time>2026-12-01T01:00:00+01:00'
    )
    assert format_filter(parsed) == (
        'status = FAILED AND labels."a b" = x AND create_time > 2026-12-01T00:00:00.000000Z'
    )


# -- properties ---------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8"), min_size=0, max_size=20)
_LABEL_KEYS = st.text(min_size=1, max_size=20).filter(
    lambda key: len(key.encode()) <= MAX_LABEL_KEY_BYTES
)
_LABEL_VALUES = st.text(max_size=40).filter(lambda v: len(v.encode()) <= MAX_LABEL_VALUE_BYTES)
_TIMES = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
_VALUES: dict[str, st.SearchStrategy[FilterValue]] = {
    "status": st.sampled_from(JobStatus),
    "kind": st.sampled_from(JobKind),
    "priority": st.sampled_from(Priority),
    "model": st.from_regex(MODEL_PATTERN, fullmatch=True),
    "pool": st.one_of(st.just(""), st.from_regex(MODEL_PATTERN, fullmatch=True)),
    "parent_id": st.from_regex(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", fullmatch=True),
    "error_code": st.one_of(st.just(""), st.from_regex(ERROR_CODE_PATTERN, fullmatch=True)),
    "tenant": st.from_regex(TENANT_PATTERN, fullmatch=True),
}


@st.composite
def job_filters(draw: st.DrawFn) -> JobFilter:
    """Filters the grammar allows an admin: each field once, create_time once per side."""
    fields = draw(st.lists(st.sampled_from(sorted(_VALUES)), unique=True, max_size=5))
    made = [FilterTerm(field, "=", draw(_VALUES[field])) for field in fields]
    keys = draw(st.lists(_LABEL_KEYS, unique=True, max_size=3))
    made += [FilterTerm(f"labels.{key}", "=", draw(_LABEL_VALUES)) for key in keys]
    for ops in ((">", ">="), ("<", "<=")):
        if draw(st.booleans()):
            made.append(FilterTerm("create_time", draw(st.sampled_from(ops)), draw(_TIMES)))
    return JobFilter(tuple(draw(st.permutations(made))))


@settings(max_examples=300, deadline=None)
@given(job_filters())
def test_every_valid_filter_round_trips_through_its_canonical_text(job_filter: JobFilter) -> None:
    assert parse_filter(format_filter(job_filter), **ADMIN) == job_filter


_PIECES = st.sampled_from(
    [
        "status", "kind", "priority", "model", "pool", "parent_id", "error_code", "tenant",
        "create_time", "labels.", "labels", "=", "<", "<=", ">", ">=", "!=", "AND", "and", "OR",
        '"', "\\", '\\"', "(", ")", "FAILED", "GROUP", "BATCH", "2026-12-01T00:00:00Z", " ", "",
        "\t", "é", "\x00", "9999-12-31T23:59:59-23:59",
    ]
)  # fmt: skip
_SOUP = st.lists(st.one_of(_PIECES, _TEXT), max_size=12).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(_TEXT, _SOUP, st.text()), st.booleans())
def test_any_text_parses_or_raises_only_a_validation_error(text: str, admin: bool) -> None:
    try:
        parsed = parse_filter(text, may_filter_tenant=admin)
    except ValidationError as error:
        [violation] = error.violations
        assert violation.field == "filter"
        assert len(violation.description.encode()) < 512
        return
    # What parses, parses again to the same filter from its canonical text.
    assert parse_filter(format_filter(parsed), may_filter_tenant=admin) == parsed
