"""jobgate: a durable job gateway for GPU work (client, worker daemon, CLI).

    from jobgate import JobClient, SyncJobClient, JobContext, RetryableError

The worker daemon lives in `jobgate.worker` (`jobgate worker` on the command
line); it is not imported here so that `import jobgate` stays light.
"""

from jobgate._client_channel import ConnectionConfig
from jobgate._client_retry import RetryPolicy
from jobgate.client import (
    TERMINAL_STATUSES,
    JobClient,
    SyncJobClient,
    is_terminal,
    job_spec,
    new_idempotency_key,
    status_name,
)
from jobgate.context import JobContext
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
