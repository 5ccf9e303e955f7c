"""The ready queue of one (model, priority) in memory: O(log N) head, rank and moves."""

from __future__ import annotations


class OrderedQueue:
    """Job ids of one (model, priority) in slot order, with O(log N) first, rank and moves.

    Each job owns a slot from its first enqueue until it ends; `take` and
    `restore` hide and show it at that slot, so a requeued job gets its
    original place back. A Fenwick tree counts the visible slots.
    """

    def __init__(self) -> None:
        self._tree: list[int] = [0]  # 1-based Fenwick tree of visible flags
        self._owner: list[str] = [""]  # slot -> job id ("" once forgotten)
        self._visible: list[bool] = [False]
        self._slot_of: dict[str, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._slot_of

    def append(self, job_id: str) -> None:
        """Give `job_id` the next slot, visible."""
        if len(self._owner) > 2 * len(self._slot_of) + 64:
            self._compact()
        slot = len(self._owner)
        below = self._prefix(slot - 1) - self._prefix(slot - (slot & -slot))
        self._tree.append(1 + below)
        self._owner.append(job_id)
        self._visible.append(True)
        self._slot_of[job_id] = slot
        self._size += 1

    def take(self, job_id: str) -> None:
        """Hide the job (claimed, or waiting out a backoff); it keeps its slot."""
        slot = self._slot_of[job_id]
        if self._visible[slot]:
            self._visible[slot] = False
            self._add(slot, -1)
            self._size -= 1

    def restore(self, job_id: str) -> None:
        """Show the job again at its original slot."""
        slot = self._slot_of[job_id]
        if not self._visible[slot]:
            self._visible[slot] = True
            self._add(slot, 1)
            self._size += 1

    def forget(self, job_id: str) -> None:
        """Give up the job's slot for good (it ended)."""
        if job_id not in self._slot_of:
            return
        self.take(job_id)
        slot = self._slot_of.pop(job_id)
        self._owner[slot] = ""

    def is_visible(self, job_id: str) -> bool:
        slot = self._slot_of.get(job_id)
        return slot is not None and self._visible[slot]

    def first(self) -> str | None:
        """The visible job with the lowest slot."""
        if self._size == 0:
            return None
        position, remaining = 0, 1
        step = 1 << (len(self._tree) - 1).bit_length()
        while step:
            candidate = position + step
            if candidate < len(self._tree) and self._tree[candidate] < remaining:
                position = candidate
                remaining -= self._tree[candidate]
            step >>= 1
        return self._owner[position + 1]

    def rank(self, job_id: str) -> int:
        """Visible jobs in slots before this job's slot."""
        return self._prefix(self._slot_of[job_id] - 1)

    def _prefix(self, slot: int) -> int:
        total = 0
        while slot > 0:
            total += self._tree[slot]
            slot -= slot & -slot
        return total

    def _add(self, slot: int, delta: int) -> None:
        while slot < len(self._tree):
            self._tree[slot] += delta
            slot += slot & -slot

    def _compact(self) -> None:
        """Renumber the owned slots densely (amortised O(log N) per append)."""
        owners = sorted(self._slot_of.items(), key=lambda item: item[1])
        visible = [self._visible[slot] for _, slot in owners]
        self._tree, self._owner, self._visible = [0], [""], [False]
        self._slot_of, self._size = {}, 0
        for (job_id, _), shown in zip(owners, visible, strict=True):
            self.append(job_id)
            if not shown:
                self.take(job_id)
