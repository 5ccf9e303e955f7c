"""A ListJobs request as the store's query: scope, filter, size, cursor (DESIGN "ListJobs")."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import pytest

from gateway_server.listing import ListQuery, list_query, list_response, listed_job
from jobgate.v1 import job_service_pb2
from serving.auth import Caller, Role
from serving.violations import ValidationError
from store.model import (
    ChildSummary,
    FilterTerm,
    Job,
    JobFilter,
    JobKind,
    JobPage,
    JobStatus,
    ListCursor,
    Priority,
)
from tests.servers.harness import Harness, fails

CLIENT = Caller("acme", Role.CLIENT)
ADMIN = Caller("ops", Role.ADMIN)
OPEN = Caller("team-a", None)
NOW = datetime(2026, 12, 1, tzinfo=UTC)
CURSOR = ListCursor(NOW, "01ARZ3NDEKTSV4RRFFQ69G5FAV")


def request(**fields: object) -> job_service_pb2.ListJobsRequest:
    return job_service_pb2.ListJobsRequest(**fields)  # type: ignore[arg-type]


def job(**fields: object) -> Job:
    base: dict[str, object] = {
        "id": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "tenant": "acme",
        "kind": JobKind.GROUP,
        "status": JobStatus.QUEUED,
        "priority": Priority.BATCH,
        "model": "m",
        "create_time": NOW,
        "update_time": NOW,
    }
    return Job(**{**base, **fields})  # type: ignore[arg-type]


def violations(caller: Caller, **fields: object) -> list[str]:
    with pytest.raises(ValidationError) as refused:
        list_query(caller, request(**fields))
    return [v.field for v in refused.value.violations]


@pytest.mark.parametrize(("caller", "scope"), [(CLIENT, "acme"), (OPEN, "team-a"), (ADMIN, None)])
def test_the_scope_is_the_callers_tenant_or_every_tenant_for_an_admin(
    caller: Caller, scope: str | None
) -> None:
    assert list_query(caller, request()).tenant == scope


@pytest.mark.parametrize(("asked", "size"), [(0, 50), (7, 7), (1000, 1000), (5000, 1000)])
def test_page_size_zero_means_50_and_above_1000_means_1000(asked: int, size: int) -> None:
    assert list_query(CLIENT, request(page_size=asked)).page_size == size


def test_the_first_page_starts_at_the_newest_job() -> None:
    assert list_query(CLIENT, request()).after is None


def test_the_filter_reaches_the_query_parsed() -> None:
    query = list_query(CLIENT, request(filter="status = FAILED"))
    assert query.filter == JobFilter((FilterTerm("status", "=", JobStatus.FAILED),))


@pytest.mark.parametrize("caller", [CLIENT, OPEN])
def test_a_tenant_term_from_a_non_admin_names_filter(caller: Caller) -> None:
    assert violations(caller, filter="tenant = acme") == ["filter"]


def test_an_admin_narrows_its_walk_with_a_tenant_term() -> None:
    query = list_query(ADMIN, request(filter="tenant = acme"))
    assert (query.tenant, query.filter.terms) == (None, (FilterTerm("tenant", "=", "acme"),))


def test_a_pages_token_resumes_the_next_query_after_its_last_job() -> None:
    first = list_query(CLIENT, request(filter="model = m"))
    response = list_response(first, JobPage(jobs=[job()], next=CURSOR))
    second = list_query(CLIENT, request(filter="model = m", page_token=response.next_page_token))
    assert second.after == CURSOR


def test_the_last_page_has_no_token() -> None:
    response = list_response(list_query(CLIENT, request()), JobPage(jobs=[], next=None))
    assert response.next_page_token == ""


def test_a_token_passed_to_another_tenant_names_page_token() -> None:
    query = ListQuery("acme", JobFilter(), 50, None)
    token = list_response(query, JobPage(jobs=[], next=CURSOR)).next_page_token
    assert violations(Caller("globex", Role.CLIENT), page_token=token) == ["page_token"]


def test_a_token_reused_with_another_filter_names_page_token() -> None:
    query = list_query(CLIENT, request(filter="model = m"))
    token = list_response(query, JobPage(jobs=[], next=CURSOR)).next_page_token
    assert violations(CLIENT, filter="model = n", page_token=token) == ["page_token"]


def test_a_listed_job_leaves_out_result_children_and_queue_position() -> None:
    children = (ChildSummary("01ARZ3NDEKTSV4RRFFQ69G5FAW", 0, JobStatus.QUEUED),)
    message = listed_job(job(result=b"r", children=children, queue_position=3, stage="s"))
    assert (message.result, list(message.children)) == (b"", [])
    assert not message.HasField("queue_position")
    assert (message.stage, message.model) == ("s", "m")


async def test_list_jobs_refuses_a_tenant_term_in_open_mode(harness: Harness) -> None:
    call = harness.job.ListJobs(request(filter="tenant = default"), timeout=5)
    failure = await fails(call)
    assert (failure.code, failure.violations) == (grpc.StatusCode.INVALID_ARGUMENT, ["filter"])
