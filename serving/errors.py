"""The one place where exceptions become gRPC statuses.

- `StoreError` -> its own `to_status()` (ErrorInfo, RetryInfo, BadRequest);
- `ValidationError` -> INVALID_ARGUMENT with BadRequest field violations;
- `AuthError` -> UNAUTHENTICATED / PERMISSION_DENIED (with ErrorInfo when it
  has a reason: POOL_NOT_ALLOWED);
- `ShuttingDown` -> UNAVAILABLE, ErrorInfo SHUTTING_DOWN, RetryInfo;
- anything else -> INTERNAL, logged once with its traceback (AIP-194: a bug
  is not an outage, so the client must not retry it). Only store trouble and
  draining are UNAVAILABLE.

Every answer is bounded (DESIGN "Error answers are bounded"): the message
and the BadRequest details together stay far below gRPC's default 8 KiB
soft / 16 KiB hard metadata limit, whatever the request held.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from jobgate.v1.errors import ERROR_DOMAIN, FieldViolation, Reason
from jobgate.v1.limits import MAX_QUOTED_INPUT_BYTES, clip_utf8
from serving.auth import AuthError
from serving.violations import ValidationError
from store.errors import StoreError

log = logging.getLogger("jobgate.server")

# The message travels twice (grpc-message, percent-encoded: up to 3 bytes per
# byte; and inside grpc-status-details-bin, base64), the details once: with
# these caps a status stays under 5 KiB on the wire.
MAX_MESSAGE_BYTES = 512
MAX_FIELD_VIOLATIONS_BYTES = 2048
# One violation's field or description; quoted input is far shorter already.
MAX_VIOLATION_PART_BYTES = 256
_NEVER_SENT = (code_pb2.OK, code_pb2.INTERNAL, code_pb2.UNKNOWN)
INTERNAL_MESSAGE = "the server hit an unexpected error (it is logged); this is a bug, not retried"


class ShuttingDown(Exception):
    """The server is draining: the caller should retry elsewhere."""


def to_status(error: BaseException, method: str = "") -> status_pb2.Status:
    """The google.rpc.Status to send for `error`, its message cut to MAX_MESSAGE_BYTES."""
    status = _status_of(error, method)
    status.message = _clipped(status.message, MAX_MESSAGE_BYTES)
    return status


def _status_of(error: BaseException, method: str) -> status_pb2.Status:
    if isinstance(error, StoreError):
        status = error.to_status()
        if status.code not in _NEVER_SENT:
            return status
        return internal(error, method)
    if isinstance(error, ValidationError):
        return _bad_request(error.violations)
    if isinstance(error, AuthError):
        return _auth(error)
    if isinstance(error, ShuttingDown):
        return unavailable(
            "the server is shutting down", Reason.SHUTTING_DOWN, timedelta(milliseconds=500)
        )
    return internal(error, method)


def _auth(error: AuthError) -> status_pb2.Status:
    """The code and message; an ErrorInfo too when the refusal has a reason (POOL_NOT_ALLOWED)."""
    status = status_pb2.Status(code=error.code, message=error.message)
    if error.reason:
        metadata = {
            key: clip_utf8(value, MAX_QUOTED_INPUT_BYTES) for key, value in error.metadata.items()
        }
        info = error_details_pb2.ErrorInfo(
            reason=error.reason, domain=ERROR_DOMAIN, metadata=metadata
        )
        status.details.add().Pack(info)
    return status


def internal(error: BaseException, method: str) -> status_pb2.Status:
    """INTERNAL for a fault of ours, logged here (and only here) with its trace."""
    log.error("unexpected error in %s", method or "a call", exc_info=error)
    return status_pb2.Status(code=code_pb2.INTERNAL, message=INTERNAL_MESSAGE)


def unavailable(message: str, reason: str | None, retry_after: timedelta) -> status_pb2.Status:
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message)
    if reason is not None:
        info = error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN)
        status.details.add().Pack(info)
    delay = duration_pb2.Duration()
    delay.FromTimedelta(retry_after)
    status.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    return status


def _bad_request(violations: Sequence[FieldViolation]) -> status_pb2.Status:
    """INVALID_ARGUMENT listing the violations that fit the budget; the message counts the rest."""
    listed: list[error_details_pb2.BadRequest.FieldViolation] = []
    budget = MAX_FIELD_VIOLATIONS_BYTES
    for violation in violations:
        item = error_details_pb2.BadRequest.FieldViolation(
            field=_clipped(violation.field, MAX_VIOLATION_PART_BYTES),
            description=_clipped(violation.description, MAX_VIOLATION_PART_BYTES),
        )
        budget -= item.ByteSize()
        if budget < 0 and listed:
            break
        listed.append(item)
    message = "; ".join(f"{v.field}: {v.description}" for v in listed)
    unlisted = len(violations) - len(listed)
    if unlisted:
        message = f"{_clipped(message, MAX_MESSAGE_BYTES - 40)} (+{unlisted} more violations)"
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=message)
    status.details.add().Pack(error_details_pb2.BadRequest(field_violations=listed))
    return status


def _clipped(text: str, limit: int) -> str:
    cut = clip_utf8(text, limit - 3)
    return text if len(text.encode()) <= limit else cut + "..."
