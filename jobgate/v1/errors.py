"""The contract's error vocabulary, hand-written beside the stubs (AIP-193).

Every error a server sends carries `google.rpc.ErrorInfo` with `domain`
ERROR_DOMAIN and one of the `Reason`s below, and bad input carries
`google.rpc.BadRequest` field violations. The store and the servers send
these names and the client reads them, all from here: the module loads
nothing but the standard library (`import jobgate` is lazy), so the store may
import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

ERROR_DOMAIN = "jobgate.dev"

#: The error_code of a failure nobody named: a handler's exception (the
#: worker daemon), a FAILED result sent without a code (the servers).
HANDLER_ERROR = "HANDLER_ERROR"


class Reason(StrEnum):
    """`ErrorInfo.reason` values (UPPER_SNAKE, at most 63 characters)."""

    JOB_NOT_FOUND = "JOB_NOT_FOUND"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    LEASE_LOST = "LEASE_LOST"
    JOB_CANCELLED = "JOB_CANCELLED"
    TENANT_QUOTA_EXCEEDED = "TENANT_QUOTA_EXCEEDED"
    QUEUE_FULL = "QUEUE_FULL"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    POOL_NOT_ALLOWED = "POOL_NOT_ALLOWED"
    JOB_NOT_RETRYABLE = "JOB_NOT_RETRYABLE"


@dataclass(frozen=True)
class FieldViolation:
    """One bad request field (`BadRequest.FieldViolation`), as the server names it."""

    field: str
    description: str
