"""Typed exceptions for jobgate's users: one root, `JobgateError`.

A server error arrives as a gRPC status with `google.rpc.Status` details
(ErrorInfo with a reason from DESIGN.md, BadRequest field violations,
RetryInfo). `error_from_rpc` turns it into the most specific class below,
keeping the reason, metadata, retry delay and field violations.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, cast

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from jobgate.v1.errors import ERROR_DOMAIN, HANDLER_ERROR, FieldViolation, Reason

__all__ = [
    "ERROR_DOMAIN",
    "CallCancelledError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "IdempotencyKeyReusedError",
    "InternalError",
    "InvalidArgumentError",
    "JobCancelledError",
    "JobNotFoundError",
    "JobNotRetryableError",
    "JobgateError",
    "LeaseLostError",
    "PermissionDeniedError",
    "PoolNotAllowedError",
    "QueueFullError",
    "QuotaExceededError",
    "Reason",
    "ResourceExhaustedError",
    "RetryableError",
    "UnauthenticatedError",
    "UnavailableError",
    "error_from_rpc",
]


class JobgateError(Exception):
    """Root of every exception jobgate raises to its users."""

    #: The gRPC status code the server answered, or None for a client-side error.
    code: grpc.StatusCode | None = None

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        retry_delay: float | None = None,
        field_violations: Sequence[FieldViolation] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        #: ErrorInfo reason (e.g. "JOB_NOT_FOUND"), "" when the server gave none.
        self.reason = reason
        #: ErrorInfo metadata (e.g. {"job_id": ...}).
        self.metadata: dict[str, str] = dict(metadata or {})
        #: RetryInfo delay in seconds, when the server suggested one.
        self.retry_delay = retry_delay
        #: BadRequest field violations (INVALID_ARGUMENT).
        self.field_violations: tuple[FieldViolation, ...] = tuple(field_violations)

    def __str__(self) -> str:
        # The reason names the failure best; else the status code (e.g. UNAVAILABLE).
        label = self.reason or (self.code.name if self.code is not None else "")
        head = f"{label}: " if label else ""
        text = f"{head}{self.message}"
        if self.field_violations:
            fields = "; ".join(f"{v.field}: {v.description}" for v in self.field_violations)
            if fields not in text:
                text = f"{text} ({fields})"
        return text


class RetryableError(JobgateError):
    """Raised by a worker handler: this attempt failed, try the job again later.

    `error_code` ([A-Z][A-Z0-9_]*, default HANDLER_ERROR) is reported with
    `retryable=true`, so the server requeues the job after a back-off until its
    attempts are used up.
    """

    def __init__(self, message: str = "", *, error_code: str = HANDLER_ERROR) -> None:
        super().__init__(message)
        self.error_code = error_code


class JobNotFoundError(JobgateError):
    """No such job for this tenant (another tenant's job looks the same)."""

    code = grpc.StatusCode.NOT_FOUND


class IdempotencyKeyReusedError(JobgateError):
    """The idempotency key was already used for a different request."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(JobgateError):
    """The job is not in a state that allows the call."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class LeaseLostError(FailedPreconditionError):
    """The worker's lease is no longer the job's live lease: stop the job."""


class JobCancelledError(FailedPreconditionError):
    """The job was cancelled while a worker held it."""


class JobNotRetryableError(FailedPreconditionError):
    """RetryJob on a job that cannot go back to work: not FAILED, CANCELLED or
    PARTIAL (a group), or a group child on its own (retry its parent)."""


class ResourceExhaustedError(JobgateError):
    """Over an admission cap; retry after `retry_delay`."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class QuotaExceededError(ResourceExhaustedError):
    """The tenant has too many live jobs."""


class QueueFullError(ResourceExhaustedError):
    """The gateway holds too many live jobs in total, or its store is full."""


class UnavailableError(JobgateError):
    """The server (or its store) cannot be reached, or it is shutting down."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(JobgateError):
    """The call did not finish within its deadline."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class InvalidArgumentError(JobgateError):
    """The request can never succeed as sent; see `field_violations`."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class PermissionDeniedError(JobgateError):
    """The credentials are valid but not for this call (client, worker or admin role)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class PoolNotAllowedError(PermissionDeniedError):
    """The job names a pool outside its tenant's pools (Submit, RetryJob), or a
    worker claims for another pool than its credential's."""


class UnauthenticatedError(JobgateError):
    """Missing or unknown bearer token."""

    code = grpc.StatusCode.UNAUTHENTICATED


class InternalError(JobgateError):
    """The server hit a fault of its own (a bug): not retried, report it."""

    code = grpc.StatusCode.INTERNAL


class CallCancelledError(JobgateError):
    """The gRPC call was cancelled (status CANCELLED), usually on the client side.

    Not a cancelled job (that is JobCancelledError), and not asyncio's
    CancelledError, which the old name `CancelledError` shadowed.
    """

    code = grpc.StatusCode.CANCELLED


# Old names kept importable, each warning once it is used.
_DEPRECATED_ALIASES: dict[str, tuple[str, type[JobgateError]]] = {
    "CancelledError": ("CallCancelledError", CallCancelledError),
}


def deprecated_alias(name: str) -> type[JobgateError]:
    """The class an old name stands for, with a DeprecationWarning (AttributeError if none)."""
    if name not in _DEPRECATED_ALIASES:
        raise AttributeError(name)
    new_name, cls = _DEPRECATED_ALIASES[name]
    warnings.warn(
        f"jobgate.{name} is deprecated (it shadows asyncio.CancelledError); use jobgate.{new_name}",
        DeprecationWarning,
        stacklevel=3,
    )
    return cls


def __getattr__(name: str) -> type[JobgateError]:
    try:
        return deprecated_alias(name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


_BY_REASON: dict[str, type[JobgateError]] = {
    Reason.JOB_NOT_FOUND: JobNotFoundError,
    Reason.IDEMPOTENCY_KEY_REUSED: IdempotencyKeyReusedError,
    Reason.LEASE_LOST: LeaseLostError,
    Reason.JOB_CANCELLED: JobCancelledError,
    Reason.TENANT_QUOTA_EXCEEDED: QuotaExceededError,
    Reason.QUEUE_FULL: QueueFullError,
    Reason.STORE_UNAVAILABLE: UnavailableError,
    Reason.SHUTTING_DOWN: UnavailableError,
    Reason.POOL_NOT_ALLOWED: PoolNotAllowedError,
    Reason.JOB_NOT_RETRYABLE: JobNotRetryableError,
}

_BY_CODE: dict[grpc.StatusCode, type[JobgateError]] = {
    grpc.StatusCode.NOT_FOUND: JobNotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: IdempotencyKeyReusedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.CANCELLED: CallCancelledError,
    grpc.StatusCode.INTERNAL: InternalError,
}


def _rich_status(error: grpc.RpcError) -> status_pb2.Status | None:
    try:
        # AioRpcError has the same code()/details()/trailing_metadata() as grpc.Call.
        return cast("status_pb2.Status | None", rpc_status.from_call(cast(Any, error)))
    except (ValueError, AttributeError, TypeError):
        return None


def error_from_rpc(error: grpc.RpcError) -> JobgateError:
    """The typed exception for a failed gRPC call (sync or aio)."""
    call = cast(Any, error)
    code: grpc.StatusCode = call.code()
    message: str = call.details() or code.name
    reason = ""
    metadata: dict[str, str] = {}
    retry_delay: float | None = None
    violations: list[FieldViolation] = []
    status = _rich_status(error)
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == ERROR_DOMAIN:
                reason, metadata = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations += [FieldViolation(v.field, v.description) for v in bad.field_violations]
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code, JobgateError)
    return cls(
        message,
        code=code,
        reason=reason,
        metadata=metadata,
        retry_delay=retry_delay,
        field_violations=violations,
    )
