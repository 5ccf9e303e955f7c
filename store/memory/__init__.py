"""The embedded store (`jobgate serve` without --redis-url): LocalStore, in memory.

LocalStore is the Store front (store/front.py) over LocalEngine
(store/memory/engine.py), whose state and state machine are in
store/memory/state.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from store.front import StoreFront
from store.memory.engine import LocalEngine
from store.model import StoreSettings


class LocalStore(StoreFront):
    """The Store protocol in process memory. Not durable: state dies with the process."""

    engine: LocalEngine

    def __init__(self, settings: StoreSettings, clock: Callable[[], float] = time.time) -> None:
        super().__init__(LocalEngine(settings, clock))


__all__ = ["LocalEngine", "LocalStore"]
