"""The embedded store (`jobgate serve` without --redis-url): LocalStore, in memory or on disk.

LocalStore is the Store front (store/front.py) over LocalEngine
(store/memory/engine.py), whose state and state machine are in
store/memory/state.py. With a `data_dir` the state is also kept there
(store/memory/durable.py over store/journal/).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store.front import StoreFront
from store.memory.durable import open_journal
from store.memory.engine import LocalEngine
from store.model import StoreSettings


class LocalStore(StoreFront):
    """The Store protocol in process memory; durable in `data_dir` when one is given.

    `data_sync`: "full" syncs every commit to disk, "normal" leaves it to the
    OS (a crash of the process loses nothing, a power loss may lose the last
    commits). `journal_knobs` go to the Journal (tests: max_pages, reserve...).
    """

    engine: LocalEngine

    def __init__(
        self,
        settings: StoreSettings,
        clock: Callable[[], float] = time.time,
        data_dir: str | Path | None = None,
        data_sync: str = "full",
        **journal_knobs: Any,
    ) -> None:
        journal = None
        if data_dir is not None:
            journal = open_journal(settings, data_dir, data_sync, clock, **journal_knobs)
        super().__init__(LocalEngine(settings, clock, journal))

    @property
    def durable(self) -> bool:
        return self.engine.journal is not None


__all__ = ["LocalEngine", "LocalStore"]
