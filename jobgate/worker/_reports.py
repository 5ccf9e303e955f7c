"""Results waiting to travel with the next ReportAndClaim call (the fast path).

A job whose handler finished hands its SetResultRequest here and awaits the
answer; the daemon's claim loop takes what is pending into its next call
(the result and the next claim share one round trip), or, while the loop sits
in a long poll or is stopping, a flush sends them on their own. A call that
fails puts its results back, in order, to be sent again: a result repeated
with the same lease and outcome is applied once. Once the transport falls
back to the classic calls (jobgate/worker/_transport.py) the queue is closed:
every result, pending or later, is declined and its job sends SetResult.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from jobgate.v1 import worker_service_pb2 as pb
from jobgate.v1.limits import MAX_REPORTS_PER_CALL


@dataclass
class Pending:
    request: pb.SetResultRequest
    #: The server's outcome, or None when the fast path cannot take this
    #: result (the job then reports it with SetResult itself).
    answer: asyncio.Future[pb.ReportOutcome.ValueType | None]


class Reports:
    """Pending results in the order their handlers finished."""

    def __init__(self, on_submit: Callable[[], None] = lambda: None) -> None:
        self._pending: deque[Pending] = deque()
        self._on_submit = on_submit
        self._closed = False

    def __len__(self) -> int:
        return len(self._pending)

    def submit(
        self, request: pb.SetResultRequest
    ) -> asyncio.Future[pb.ReportOutcome.ValueType | None]:
        answer: asyncio.Future[pb.ReportOutcome.ValueType | None] = (
            asyncio.get_running_loop().create_future()
        )
        if self._closed:
            answer.set_result(None)  # no call carries results: the job sends its own
            return answer
        self._pending.append(Pending(request, answer))
        self._on_submit()
        return answer

    def take(self) -> list[Pending]:
        """Up to one call's worth of results, oldest first (cancelled waiters dropped)."""
        batch: list[Pending] = []
        while self._pending and len(batch) < MAX_REPORTS_PER_CALL:
            item = self._pending.popleft()
            if not item.answer.done():
                batch.append(item)
        return batch

    def put_back(self, batch: list[Pending]) -> None:
        """Results of a call that failed: first in line for the next one."""
        self._pending.extendleft(reversed(batch))

    @staticmethod
    def settle(batch: list[Pending], answers: list[pb.ResultAnswer]) -> None:
        for item, answer in zip(batch, answers, strict=False):
            if not item.answer.done():
                item.answer.set_result(answer.outcome)
        for item in batch[len(answers) :]:  # a server that answered short: report alone
            Reports.decline([item])

    @staticmethod
    def decline(batch: list[Pending]) -> None:
        """These results go by SetResult instead (invalid batch, no fast path)."""
        for item in batch:
            if not item.answer.done():
                item.answer.set_result(None)

    def close(self) -> None:
        """No call carries results any more: decline what is pending and what comes."""
        self._closed = True
        while self._pending:
            self.decline(self.take())
