"""Handler threads, started once and reused: a sync handler runs on one of them.

Starting a thread per job cost a fifth of the daemon's time under load and
blocked the event loop until the new thread ran. The pool keeps its threads:
a job goes to an idle one, and a new thread starts only when none is idle,
so a handler that never returns (stuck in a GPU call, say) holds just its own
thread and never starves the jobs after it. The threads are daemon threads,
so a stuck handler never blocks the process's exit either.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

Work = Callable[[], None]


class HandlerThreads:
    """A grow-on-demand pool of daemon threads; `run(work)` never blocks."""

    def __init__(self, name: str = "handler") -> None:
        self._name = name
        self._work: queue.SimpleQueue[Work] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0

    @property
    def size(self) -> int:
        """Threads started so far (idle or busy)."""
        return self._started

    def run(self, work: Work) -> None:
        """Run `work` on an idle thread, or on a new one when none is idle.

        `work` must not raise: it reports its own outcome (see start_in_thread).
        If no thread can start, this raises and `work` never runs.
        """
        with self._lock:
            start = self._idle == 0
            if start:
                self._started += 1
                number = self._started
            else:
                self._idle -= 1
        if start:
            # Started before the work is queued: a thread that cannot start
            # raises here with nothing left queued to run later on another.
            try:
                name = f"{self._name}-{number}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()
            except BaseException:
                with self._lock:
                    self._started -= 1
                raise
        self._work.put(work)

    def _serve(self) -> None:
        while True:
            work = self._work.get()
            work()
            with self._lock:
                self._idle += 1
