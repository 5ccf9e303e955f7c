"""A ListJobs request as the store's query, and a page back as the response.

The servicer's whole part of ListJobs is: `query = list_query(caller,
request)`, one store read with the query's scope, filter, cursor and size,
then `list_response(query, page)`. The scope comes from the caller only
(its tenant; None, every tenant, for an admin), never from the request: a
`tenant` term narrows an admin's walk like any other term.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway_server import validate
from gateway_server.list_filter import parse_filter
from gateway_server.page_token import decode_page_token, encode_page_token
from jobgate.v1 import job_pb2, job_service_pb2
from serving.auth import Caller
from serving.convert import job_to_proto
from store.model import Job, JobFilter, JobPage, ListCursor


@dataclass(frozen=True)
class ListQuery:
    #: Whose jobs: one tenant's, or None for every tenant's (an admin).
    tenant: str | None
    filter: JobFilter
    page_size: int
    #: Resume after this job (newest first); None for the first page.
    after: ListCursor | None


def list_query(caller: Caller, request: job_service_pb2.ListJobsRequest) -> ListQuery:
    """The validated query; ValidationError naming page_size, filter or page_token."""
    validate.list_jobs(request)
    scope = caller.tenant_scope
    job_filter = parse_filter(request.filter, may_filter_tenant=caller.sees_all_tenants)
    after = decode_page_token(request.page_token, scope, job_filter)
    return ListQuery(scope, job_filter, validate.page_size(request.page_size), after)


def list_response(query: ListQuery, page: JobPage) -> job_service_pb2.ListJobsResponse:
    token = "" if page.next is None else encode_page_token(page.next, query.tenant, query.filter)
    return job_service_pb2.ListJobsResponse(
        jobs=[listed_job(job) for job in page.jobs], next_page_token=token
    )


def listed_job(job: Job) -> job_pb2.Job:
    """A job as ListJobs lists it: every field but result, children and queue_position."""
    message = job_to_proto(job)
    for name in ("result", "children", "queue_position"):
        message.ClearField(name)
    return message
