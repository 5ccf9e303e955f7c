"""Which partitions may hold ready jobs of a queue class, learned from the ready notifications.

A claim over N partitions would read every partition's queue heads before
it claims (one pipeline of 3 x N x classes reads): the cost that grows with
the partitions. But every job that becomes claimable is announced on its
partition's ready channel ("r <class> <id>"), and the worker-server hears
them all, so a claim can read only the partitions that may hold something,
and claim at once, in one round trip, when that is a single partition.

A partition leaves a class's set when a read finds its queues empty, unless
a notification came since that read began (a generation per class and
partition tells). Knowledge of a class is trusted for FULL_READ_SECONDS:
then, and for a class never read, the claim reads every partition again, so
a notification lost while pub/sub reconnected costs at most that much delay
in claim order, never a job.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

#: How long what the notifications told about a class is trusted without a
#: read of every partition.
FULL_READ_SECONDS = 1.0


class Occupancy:
    def __init__(self, channels: Mapping[str, int]) -> None:
        """`channels`: each partition's ready channel -> its index."""
        self._channels = dict(channels)
        self._ready: dict[str, set[int]] = {}  # class -> partitions that may hold ready jobs
        self._known_at: dict[str, float] = {}  # class -> when every partition was last read
        self._generation: dict[tuple[str, int], int] = {}

    def heard(self, channel: str, job_class: str) -> None:
        """A job of `job_class` became claimable in the channel's partition."""
        index = self._channels.get(channel)
        if index is None:
            return
        self._ready.setdefault(job_class, set()).add(index)
        key = (job_class, index)
        self._generation[key] = self._generation.get(key, 0) + 1

    def maybe(self, index: int) -> None:
        """A transition in partition `index` may have made jobs claimable (a requeue, a
        group's next child): this store's own, known before its notification comes."""
        for job_class, ready in self._ready.items():
            ready.add(index)
            key = (job_class, index)
            self._generation[key] = self._generation.get(key, 0) + 1

    def generations(
        self, classes: Iterable[str], indexes: Iterable[int]
    ) -> dict[tuple[str, int], int]:
        """The generations a read of `indexes` begins at (pass them to `read`)."""
        return {(c, i): self._generation.get((c, i), 0) for c in classes for i in indexes}

    def candidates(self, classes: Sequence[str]) -> list[int] | None:
        """The partitions a claim of `classes` must read, or None for every one."""
        now = time.monotonic()
        found: set[int] = set()
        for job_class in classes:
            known_at = self._known_at.get(job_class)
            if known_at is None or now - known_at > FULL_READ_SECONDS:
                return None
            found |= self._ready.get(job_class, set())
        return sorted(found)

    def read(
        self,
        began: Mapping[tuple[str, int], int],
        nonempty: set[tuple[str, int]],
        complete: bool,
    ) -> None:
        """What a read starting at `began` found: (class, partition) pairs with ready jobs.

        `complete`: it read every partition (the classes are known from now on).
        """
        now = time.monotonic()
        for (job_class, index), generation in began.items():
            ready = self._ready.setdefault(job_class, set())
            if (job_class, index) in nonempty:
                ready.add(index)
            elif self._generation.get((job_class, index), 0) == generation:
                ready.discard(index)  # empty, and nothing announced since the read began
            if complete:
                self._known_at[job_class] = now
