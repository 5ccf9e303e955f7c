"""The store's exceptions: one root, each with a canonical code and reason.

Codes are `google.rpc.Code` values (transport-neutral); the servers map any
`StoreError` to a gRPC status in one place via `to_status()`. The domain and
the reasons are the contract's own (jobgate/v1/errors.py), not a copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from datetime import timedelta

from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from jobgate.v1.errors import ERROR_DOMAIN, Reason


class StoreError(Exception):
    """Root of every error the store raises."""

    code: int = code_pb2.INTERNAL
    reason: str = ""
    retry_after: timedelta | None = None
    #: Within a batch, the field of the item that names the refusal.
    item_field: str = ""

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: Mapping[str, str] = metadata
        #: Within a batch (BatchSubmit), the index of the refused item.
        self.item: int | None = None

    def for_item(self, index: int) -> StoreError:
        """This error, as the refusal of item `index` of a batch."""
        self.item = index
        return self

    def _item_violation(self) -> error_details_pb2.BadRequest | None:
        if self.item is None:
            return None
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=f"requests[{self.item}]{self.item_field}", description=self.message
        )
        return error_details_pb2.BadRequest(field_violations=[violation])

    def to_status(self) -> status_pb2.Status:
        """A google.rpc.Status with ErrorInfo, plus RetryInfo where a retry helps."""
        status = status_pb2.Status(code=self.code, message=self.message)
        if self.reason:
            info = error_details_pb2.ErrorInfo(
                reason=self.reason, domain=ERROR_DOMAIN, metadata=dict(self.metadata)
            )
            status.details.add().Pack(info)
        if self.retry_after is not None:
            delay = duration_pb2.Duration()
            delay.FromTimedelta(self.retry_after)
            status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        item = self._item_violation()
        if item is not None:
            status.details.add().Pack(item)
        return status


class JobNotFound(StoreError):
    """No such job for this tenant (another tenant's job looks exactly the same)."""

    code = code_pb2.NOT_FOUND
    reason = Reason.JOB_NOT_FOUND


class IdempotencyKeyReused(StoreError):
    """The key was used before by this tenant for a different request."""

    code = code_pb2.ALREADY_EXISTS
    reason = Reason.IDEMPOTENCY_KEY_REUSED
    item_field = ".idempotency_key"


class LeaseLost(StoreError):
    """The lease id is not the job's live lease: the caller must stop."""

    code = code_pb2.FAILED_PRECONDITION
    reason = Reason.LEASE_LOST


class JobCancelled(StoreError):
    """The job was cancelled while the caller held its lease."""

    code = code_pb2.FAILED_PRECONDITION
    reason = Reason.JOB_CANCELLED


class JobNotRetryable(StoreError):
    """RetryJob on a job that cannot go back to work: not FAILED, CANCELLED or
    (a group) PARTIAL, a group child on its own, or a group with nothing to redo."""

    code = code_pb2.FAILED_PRECONDITION
    reason = "JOB_NOT_RETRYABLE"


class QuotaExceeded(StoreError):
    """The tenant has too many live jobs."""

    code = code_pb2.RESOURCE_EXHAUSTED
    reason = Reason.TENANT_QUOTA_EXCEEDED
    retry_after = timedelta(seconds=5)


class QueueFull(StoreError):
    """Too many live jobs in total, or the store is out of memory."""

    code = code_pb2.RESOURCE_EXHAUSTED
    reason = Reason.QUEUE_FULL
    retry_after = timedelta(seconds=5)


class StoreUnavailable(StoreError):
    """The backing store cannot be reached or timed out."""

    code = code_pb2.UNAVAILABLE
    reason = Reason.STORE_UNAVAILABLE
    retry_after = timedelta(seconds=1)


class InvalidRequest(StoreError):
    """A request that can never succeed, e.g. a group larger than the cap."""

    code = code_pb2.INVALID_ARGUMENT

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description

    @property
    def item_field(self) -> str:  # type: ignore[override]
        return f".{self.field}"

    def to_status(self) -> status_pb2.Status:
        if self.item is not None:
            return super().to_status()  # the item's own violation, with its index
        status = super().to_status()
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=self.field, description=self.description
        )
        status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[violation]))
        return status


class StoreMisconfigured(StoreError):
    """The backing store is set up in a way that could lose jobs (refused at start)."""

    code = code_pb2.FAILED_PRECONDITION


# Told the operation's name ("get", "set_result"...) each time the backend fails.
FailureHook = Callable[[str], None]


def ignore_failure(operation: str) -> None:
    """The default FailureHook: nobody counts."""


def is_failure(error: BaseException) -> bool:
    """The backend failed: unreachable, or something that is not a StoreError at all.

    Domain outcomes (JobNotFound, LeaseLost, QuotaExceeded...) are answers.
    """
    return isinstance(error, StoreUnavailable) or not isinstance(error, StoreError)


class reporting(contextlib.AbstractContextManager[None]):  # lower case: read as a function
    """Tell `on_failure` about a failure raised inside, then let it propagate.

    A class, not a generator: it wraps every store call, and a generator's
    context manager costs about a microsecond more a call."""

    __slots__ = ("_on_failure", "_operation")

    def __init__(self, on_failure: FailureHook, operation: str) -> None:
        self._on_failure = on_failure
        self._operation = operation

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: object
    ) -> None:
        if error is not None:
            self.saw(error)

    def saw(self, error: BaseException) -> None:
        """Tell `on_failure` if `error`, raised by the operation, is a failure."""
        if isinstance(error, Exception) and is_failure(error):
            self._on_failure(self._operation)
