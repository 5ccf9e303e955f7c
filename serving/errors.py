"""The one place where exceptions become gRPC statuses.

- `StoreError` -> its own `to_status()` (ErrorInfo, RetryInfo, BadRequest);
- `ValidationError` -> INVALID_ARGUMENT with BadRequest field violations;
- `AuthError` -> UNAUTHENTICATED / PERMISSION_DENIED;
- `ShuttingDown` -> UNAVAILABLE, ErrorInfo SHUTTING_DOWN, RetryInfo;
- anything else -> UNAVAILABLE (logged with its traceback): no request may
  ever end INTERNAL or UNKNOWN, and a retry on another replica may help.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from serving.auth import AuthError
from serving.validation import ValidationError
from store.errors import ERROR_DOMAIN, StoreError

log = logging.getLogger("jobgate.server")

REASON_SHUTTING_DOWN = "SHUTTING_DOWN"
_NEVER_SENT = (code_pb2.OK, code_pb2.INTERNAL, code_pb2.UNKNOWN)


class ShuttingDown(Exception):
    """The server is draining: the caller should retry elsewhere."""


def to_status(error: BaseException, method: str = "") -> status_pb2.Status:
    """The google.rpc.Status to send for `error`."""
    if isinstance(error, StoreError):
        status = error.to_status()
        if status.code not in _NEVER_SENT:
            return status
        log.error("store error without a public code in %s", method or "a call", exc_info=error)
        return unavailable(status.message, None, timedelta(seconds=1))
    if isinstance(error, ValidationError):
        return _bad_request(error)
    if isinstance(error, AuthError):
        return status_pb2.Status(code=error.code, message=error.message)
    if isinstance(error, ShuttingDown):
        return unavailable(
            "the server is shutting down", REASON_SHUTTING_DOWN, timedelta(milliseconds=500)
        )
    log.error("unexpected error in %s", method or "a call", exc_info=error)
    return unavailable("the server hit an unexpected error; retry", None, timedelta(seconds=1))


def unavailable(message: str, reason: str | None, retry_after: timedelta) -> status_pb2.Status:
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message)
    if reason is not None:
        info = error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN)
        status.details.add().Pack(info)
    delay = duration_pb2.Duration()
    delay.FromTimedelta(retry_after)
    status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return status


def _bad_request(error: ValidationError) -> status_pb2.Status:
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=str(error))
    violations = [
        error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
        for v in error.violations
    ]
    status.details.add().Pack(error_details_pb2.BadRequest(field_violations=violations))
    return status
