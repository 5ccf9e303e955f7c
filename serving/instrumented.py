"""Store failures counted in jobgate_store_errors_total{operation}.

Each store names its operations where it calls its backend and reports the
failures to its `on_failure` hook (see store/errors.py `is_failure`: the
store unreachable, or an error that is not a StoreError; domain answers such
as JobNotFound are not failures). Here the hook is pointed at the metric.
"""

from __future__ import annotations

from serving.metrics import Metrics
from store.protocol import Store


def count_store_errors(store: Store, metrics: Metrics) -> Store:
    """`store`, now counting its failed operations in `metrics`."""
    store.on_failure = metrics.store_failed
    return store
