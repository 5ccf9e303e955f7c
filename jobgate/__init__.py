"""jobgate: a durable job gateway for GPU work (client, worker daemon, CLI).

    from jobgate import JobClient, SyncJobClient, JobContext, RetryableError

Packages: `jobgate.client` (JobClient, SyncJobClient), `jobgate.worker` (the
GPU-host daemon and the JobContext a handler gets), `jobgate.cli` (the
`jobgate` command) and `jobgate.v1` (the generated API stubs and the
contract's vocabulary: limits and error reasons). None of them loads the
servers, the store or Redis.

The names below are resolved on first use (PEP 562), so importing a light
module of the package (`jobgate.v1.limits`, `jobgate.v1.errors`, which the
store and the servers share with the client) loads neither the client, the
worker daemon nor grpc.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_CLIENT = (
    "TERMINAL_STATUSES ConnectionConfig JobClient RetryPolicy SyncJobClient"
    " is_terminal job_spec new_idempotency_key status_name"
)
# Where each public name lives; everything else in __all__ is in jobgate.errors.
_HOME: dict[str, str] = {
    **{name: "jobgate.errors" for name in __all__},
    **{name: "jobgate.client" for name in _CLIENT.split()},
    "JobContext": "jobgate.worker",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use; old names warn."""
    home = _HOME.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if not name.startswith("_"):
        # Old names (`CancelledError`) stay importable with a DeprecationWarning.
        from jobgate.errors import deprecated_alias

        try:
            return deprecated_alias(name)
        except AttributeError:
            pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
