"""The Python client for JobService: `JobClient` (async) and `SyncJobClient`.

    from jobgate.client import JobClient

The clients are in `_client`, channel settings (target, token, TLS) in
`_channel`, and the retry policy in `_retry`.
"""

from jobgate.client._channel import DEFAULT_TARGET, ConnectionConfig
from jobgate.client._client import (
    PRIORITIES,
    TERMINAL_STATUSES,
    JobClient,
    SyncJobClient,
    is_terminal,
    job_spec,
    new_idempotency_key,
    priority_value,
    status_name,
)
from jobgate.client._retry import NO_RETRY, RetryPolicy

__all__ = [
    "DEFAULT_TARGET",
    "NO_RETRY",
    "PRIORITIES",
    "TERMINAL_STATUSES",
    "ConnectionConfig",
    "JobClient",
    "RetryPolicy",
    "SyncJobClient",
    "is_terminal",
    "job_spec",
    "new_idempotency_key",
    "priority_value",
    "status_name",
]
