"""The GPU-host worker daemon (`jobgate worker`) and the handler's context.

    from jobgate.worker import Worker, WorkerConfig, load_handler

The daemon is in `_daemon`, one claimed job's run in `_job`, and the
`JobContext` a handler receives in `_context`.
"""

from jobgate.worker._context import JobContext
from jobgate.worker._daemon import (
    DEFAULT_WORKER_TARGET,
    HandlerLoadError,
    Worker,
    WorkerConfig,
    default_worker_id,
    load_handler,
    run_worker,
)
from jobgate.worker._job import Handler

__all__ = [
    "DEFAULT_WORKER_TARGET",
    "Handler",
    "HandlerLoadError",
    "JobContext",
    "Worker",
    "WorkerConfig",
    "default_worker_id",
    "load_handler",
    "run_worker",
]
