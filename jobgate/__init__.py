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
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    FieldViolation,
    IdempotencyKeyReusedError,
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
from jobgate.worker import JobContext

__all__ = [
    "TERMINAL_STATUSES",
    "CancelledError",
    "ConnectionConfig",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "IdempotencyKeyReusedError",
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
