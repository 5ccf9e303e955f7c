"""Validation of JobService requests; each violation names its field."""

from __future__ import annotations

from jobgate.v1 import job_pb2, job_service_pb2
from jobgate.v1.limits import (
    DEFAULT_PAGE_SIZE,
    MAX_ATTEMPTS,
    MAX_CANCEL_REASON_BYTES,
    MAX_CONTENT_TYPE_BYTES,
    MAX_DURATION_SECONDS,
    MAX_FILTER_BYTES,
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_PAGE_SIZE,
    MAX_PAGE_TOKEN_BYTES,
)
from serving.settings import ServerSettings
from serving.violations import Violations

_PRIORITIES = tuple(job_pb2.Priority.values())


def submit(request: job_service_pb2.SubmitRequest, settings: ServerSettings) -> None:
    """Refuse a request that is malformed or can never fit the server's caps."""
    v = Violations()
    _submit(v, "", request, settings)
    v.raise_if_any()


def batch_submit(request: job_service_pb2.BatchSubmitRequest, settings: ServerSettings) -> None:
    """Each item as Submit checks it, its fields named `requests[i].…`."""
    v = Violations()
    count, cap = len(request.requests), settings.max_batch_submit
    if not 1 <= count <= cap:
        v.add("requests", f"must have 1 to {cap} entries (got {count})")
        v.raise_if_any()
    for index, item in enumerate(request.requests):
        _submit(v, f"requests[{index}].", item, settings)
    units = sum(len(item.group.children) or 1 for item in request.requests)
    if units > _max_live(settings):
        # All or nothing: a batch whose jobs exceed a live cap can never be admitted.
        v.add("requests", f"at most {_max_live(settings)} jobs in all (got {units})")
    v.raise_if_any()


def _submit(
    v: Violations, prefix: str, request: job_service_pb2.SubmitRequest, settings: ServerSettings
) -> None:
    key_path = f"{prefix}idempotency_key"
    v.printable_ascii(key_path, request.idempotency_key, MAX_IDEMPOTENCY_KEY_BYTES, required=False)
    v.enum(f"{prefix}priority", request.priority, _PRIORITIES, "PRIORITY_*")
    work = request.WhichOneof("work")
    if work == "job":
        _spec(v, f"{prefix}job", request.job, settings.max_payload_bytes)
    elif work == "group":
        max_children = _max_children(settings)
        _group(v, f"{prefix}group", request.group, settings.max_payload_bytes, max_children)
    else:
        v.add(f"{prefix}work", "one of job or group is required")


def _max_children(settings: ServerSettings) -> int:
    """The largest group that can ever be admitted.

    Each child counts as one live job, so a group over --max-live-per-tenant
    or --max-live-total would get RESOURCE_EXHAUSTED with RetryInfo forever:
    DESIGN wants INVALID_ARGUMENT for a request that can never fit.
    """
    return min(settings.max_group_children, _max_live(settings))


def _max_live(settings: ServerSettings) -> int:
    return min(settings.max_live_per_tenant, settings.max_live_total)


def _group(
    v: Violations, path: str, group: job_pb2.GroupSpec, max_payload: int, max_children: int
) -> None:
    count = len(group.children)
    if not 1 <= count <= max_children:
        v.add(f"{path}.children", f"must have 1 to {max_children} entries (got {count})")
        if count > max_children:
            return  # the cap decides; don't also inspect every child
    if group.max_parallel < 0:
        v.add(f"{path}.max_parallel", "must not be negative")
    for index, child in enumerate(group.children):
        _spec(v, f"{path}.children[{index}]", child, max_payload)


def _spec(v: Violations, path: str, spec: job_pb2.JobSpec, max_payload_bytes: int) -> None:
    v.model(f"{path}.model", spec.model)
    v.pool(f"{path}.pool", spec.pool)
    v.max_bytes(f"{path}.payload", spec.payload, max_payload_bytes)
    v.max_bytes(f"{path}.content_type", spec.content_type, MAX_CONTENT_TYPE_BYTES)
    v.labels(f"{path}.labels", spec.labels)
    v.int_range(f"{path}.max_attempts", spec.max_attempts, 0, MAX_ATTEMPTS)
    v.duration(f"{path}.queue_timeout", spec.queue_timeout, MAX_DURATION_SECONDS)
    v.duration(f"{path}.run_timeout", spec.run_timeout, MAX_DURATION_SECONDS)


def job_id(value: str) -> None:
    v = Violations()
    v.job_id("job_id", value)
    v.raise_if_any()


def retry_job(request: job_service_pb2.RetryJobRequest) -> None:
    job_id(request.job_id)


def cancel(request: job_service_pb2.CancelRequest) -> None:
    v = Violations()
    v.job_id("job_id", request.job_id)
    v.max_bytes("reason", request.reason, MAX_CANCEL_REASON_BYTES)
    v.raise_if_any()


def list_jobs(request: job_service_pb2.ListJobsRequest) -> None:
    """The sizes; the filter's grammar and the token are checked as they are read."""
    v = Violations()
    if request.page_size < 0:
        v.add("page_size", f"must not be negative (got {request.page_size})")
    v.max_bytes("filter", request.filter, MAX_FILTER_BYTES)
    v.max_bytes("page_token", request.page_token, MAX_PAGE_TOKEN_BYTES)
    v.raise_if_any()


def page_size(requested: int) -> int:
    """ListJobs' page size: 0 means DEFAULT_PAGE_SIZE, above MAX_PAGE_SIZE means that."""
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
