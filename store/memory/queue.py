"""One ready queue in memory: job ids in (score, id) order, O(log N) head, rank and moves.

The twin of a Redis ready queue (a sorted set: members ordered by score,
then by id). A job keeps its score from its first enqueue until it ends:
`take` hides it (claimed, or waiting out a backoff) and `restore` shows it
again at the same place, so a requeued job gets its original place back.
"""

from __future__ import annotations

from sortedcontainers import SortedList


class OrderedQueue:
    def __init__(self) -> None:
        self._visible: SortedList[tuple[float, str]] = (
            SortedList()
        )  # (score, job id) of the claimable jobs
        self._score_of: dict[str, float] = {}  # every job owning a place, shown or not

    def __len__(self) -> int:
        return len(self._visible)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._score_of

    def append(self, job_id: str, score: float) -> None:
        """Give `job_id` its place at `score`, visible."""
        self._score_of[job_id] = score
        self._visible.add((score, job_id))

    def take(self, job_id: str) -> None:
        """Hide the job; it keeps its place."""
        self._visible.discard((self._score_of[job_id], job_id))

    def restore(self, job_id: str) -> None:
        """Show the job again at its place."""
        entry = (self._score_of[job_id], job_id)
        if entry not in self._visible:
            self._visible.add(entry)

    def forget(self, job_id: str) -> None:
        """Give up the job's place for good (it ended)."""
        score = self._score_of.pop(job_id, None)
        if score is not None:
            self._visible.discard((score, job_id))

    def is_visible(self, job_id: str) -> bool:
        score = self._score_of.get(job_id)
        return score is not None and (score, job_id) in self._visible

    def first(self) -> tuple[float, str] | None:
        """(score, id) of the visible job claimed first."""
        return self._visible[0] if self._visible else None

    def rank(self, job_id: str) -> int:
        """Visible jobs claimed before this one."""
        return self.before(self._score_of[job_id], job_id)

    def before(self, score: float, job_id: str) -> int:
        """Visible jobs ordered before (score, job_id)."""
        return int(self._visible.bisect_left((score, job_id)))
