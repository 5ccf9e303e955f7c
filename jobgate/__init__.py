"""jobgate: a durable job gateway for GPU work (client, worker daemon, CLI).

    from jobgate import JobClient, SyncJobClient, JobContext, RetryableError

Packages: `jobgate.client` (JobClient, SyncJobClient), `jobgate.worker` (the
GPU-host daemon and the JobContext a handler gets), `jobgate.cli` (the
`jobgate` command) and `jobgate.v1` (the generated API stubs and the
contract's limits). None of them loads the servers, the store or Redis.
"""

from jobgate.client import (
    TERMINAL_STATUSES,
    ConnectionConfig,
    JobClient,
    RetryPolicy,
    SyncJobClient,
    is_terminal,
    job_spec,
    new_idempotency_key,
    status_name,
)
from jobgate.errors import (
    CallCancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    FieldViolation,
    IdempotencyKeyReusedError,
    InternalError,
    InvalidArgumentError,
    JobCancelledError,
    JobgateError,
    JobNotFoundError,
    LeaseLostError,
    PermissionDeniedError,
    QueueFullError,
    QuotaExceededError,
    ResourceExhaustedError,
    RetryableError,
    UnauthenticatedError,
    UnavailableError,
)
from jobgate.errors import deprecated_alias as _deprecated_alias
from jobgate.worker import JobContext

__all__ = [
    "TERMINAL_STATUSES",
    "CallCancelledError",
    "ConnectionConfig",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "IdempotencyKeyReusedError",
    "InternalError",
    "InvalidArgumentError",
    "JobCancelledError",
    "JobClient",
    "JobContext",
    "JobNotFoundError",
    "JobgateError",
    "LeaseLostError",
    "PermissionDeniedError",
    "QueueFullError",
    "QuotaExceededError",
    "ResourceExhaustedError",
    "RetryPolicy",
    "RetryableError",
    "SyncJobClient",
    "UnauthenticatedError",
    "UnavailableError",
    "is_terminal",
    "job_spec",
    "new_idempotency_key",
    "status_name",
]


def __getattr__(name: str) -> type[JobgateError]:
    """Old names (`CancelledError`), still importable with a DeprecationWarning."""
    try:
        return _deprecated_alias(name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
