"""Durable job state: the Store protocol, its model, errors and backends.

This package is the only place that imports redis.
"""

from __future__ import annotations

from store.errors import (
    IdempotencyKeyReused,
    InvalidRequest,
    JobCancelled,
    JobNotFound,
    JobNotRetryable,
    LeaseLost,
    QueueFull,
    QuotaExceeded,
    StoreError,
    StoreMisconfigured,
    StoreUnavailable,
)
from store.model import StoreSettings
from store.protocol import Store

__all__ = [
    "IdempotencyKeyReused",
    "InvalidRequest",
    "JobCancelled",
    "JobNotFound",
    "JobNotRetryable",
    "LeaseLost",
    "QueueFull",
    "QuotaExceeded",
    "Store",
    "StoreError",
    "StoreMisconfigured",
    "StoreSettings",
    "StoreUnavailable",
    "open_store",
]


def open_store(
    url: str | None,
    settings: StoreSettings | None = None,
    partition: str = "default",
    partitions: int = 1,
    hear_ready: bool = True,
    hear_changes: bool = True,
    data_dir: str | None = None,
    data_sync: str = "full",
) -> Store:
    """The store for a URL: None or "memory://" is LocalStore, any Redis URL is RedisStore.

    Redis URLs (store/redis/urls.py): redis://, rediss:// (TLS), unix://,
    redis+sentinel://HOST:PORT[,HOST:PORT...]/<master>[/db] and
    redis+cluster://. A malformed or unsupported URL raises ValueError
    (BadRedisUrl) naming what is wrong. `partitions` (--redis-partitions)
    spreads a Redis deployment over that many hash tags (store/redis/engine.py).
    `hear_ready` / `hear_changes`: which notification channels a Redis
    store subscribes to (RedisStore; a server leaves out what none of its
    calls wait for).
    `data_dir` / `data_sync` (--data-dir, --data-sync): the embedded store
    keeps its state in that directory (store/memory/durable.py); ignored
    with a Redis URL.
    The caller awaits `store.open()` before use.
    """
    settings = settings or StoreSettings()
    if url is None or url.startswith("memory://"):
        from store.memory import LocalStore

        return LocalStore(settings, data_dir=data_dir, data_sync=data_sync)
    from store.redis import RedisStore

    return RedisStore(url, settings, partition, partitions, hear_ready, hear_changes)
