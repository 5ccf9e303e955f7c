"""LocalEngine's ListJobs indexes: sorted runs kept by the transitions themselves.

The runs are store/listing.py's: per (tenant, status, kind) and per
(tenant, model), each a SortedList of (create_time in µs, id), so a seek is
O(log N) and a page of a merge of R runs O((R + page_size) log N).
`State.emit` (every status change, creation included) moves a job between
status runs; `State.purge` (a job past its result_ttl, met by a read or by
recovery's expiry heap) takes it out of every run. A group's children are
read from the group's record.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator
from typing import TypeVar

from sortedcontainers import SortedList

from store.listing import IndexKey, Walk, timestamp_micros
from store.memory.record import Record
from store.model import JobKind, JobStatus

StatusRun = tuple[str, JobStatus, JobKind]
ModelRun = tuple[str, str]
R = TypeVar("R")


def record_key(record: Record) -> IndexKey:
    # the snapshot's conversion (store/memory/state.py dt), so a cursor made
    # from a listed Job finds its own key
    return timestamp_micros(record.create_time), record.id


class Index:
    """Every indexed job of one LocalEngine, by status run and by model run."""

    def __init__(self) -> None:
        self.status_runs: dict[StatusRun, SortedList[IndexKey]] = {}
        self.model_runs: dict[ModelRun, SortedList[IndexKey]] = {}

    # -- upkeep -------------------------------------------------------------

    def moved(self, record: Record, before: JobStatus | None) -> None:
        """`record` now has its status; it had `before` (None: it was just created)."""
        key = record_key(record)
        if before is None:
            self._run(self.model_runs, (record.tenant, record.model)).add(key)
        else:
            self._discard(self.status_runs, (record.tenant, before, record.kind), key)
        self._run(self.status_runs, (record.tenant, record.status, record.kind)).add(key)

    def fill(self, records: Iterable[Record]) -> None:
        """Index `records` at once (a restart): one sort per run, not one insert per job."""
        status_keys: dict[StatusRun, list[IndexKey]] = {}
        model_keys: dict[ModelRun, list[IndexKey]] = {}
        for record in records:  # a million at a restart: no setdefault's spare lists
            key = record_key(record)
            status_run = (record.tenant, record.status, record.kind)
            if (keys := status_keys.get(status_run)) is None:
                keys = status_keys[status_run] = []
            keys.append(key)
            model_run = (record.tenant, record.model)
            if (keys := model_keys.get(model_run)) is None:
                keys = model_keys[model_run] = []
            keys.append(key)
        for status_run, keys in status_keys.items():
            self._run(self.status_runs, status_run).update(keys)
        for model_run, keys in model_keys.items():
            self._run(self.model_runs, model_run).update(keys)

    def removed(self, record: Record) -> None:
        """`record` is gone (past its result_ttl)."""
        key = record_key(record)
        self._discard(self.status_runs, (record.tenant, record.status, record.kind), key)
        self._discard(self.model_runs, (record.tenant, record.model), key)

    @staticmethod
    def _run(runs: dict[R, SortedList[IndexKey]], name: R) -> SortedList[IndexKey]:
        run = runs.get(name)
        if run is None:
            run = runs[name] = SortedList()
        return run

    @staticmethod
    def _discard(runs: dict[R, SortedList[IndexKey]], name: R, key: IndexKey) -> None:
        run = runs.get(name)
        if run is not None:
            run.discard(key)
            if not run:
                del runs[name]

    # -- reads --------------------------------------------------------------

    def tenants(self) -> set[str]:
        return {tenant for tenant, _, _ in self.status_runs}

    def runs(self, walk: Walk) -> list[SortedList[IndexKey]]:
        """The sorted runs a status or model walk merges."""
        tenants = [walk.tenant] if walk.tenant is not None else sorted(self.tenants())
        if walk.driver == "model":
            names: Iterable[ModelRun] = [(tenant, walk.model) for tenant in tenants]
            return [run for name in names if (run := self.model_runs.get(name))]
        status_names = [
            (tenant, status, kind) for tenant in tenants for status, kind in walk.status_runs()
        ]
        return [run for name in status_names if (run := self.status_runs.get(name))]

    def read(
        self,
        runs: list[SortedList[IndexKey]],
        upper: IndexKey | None,
        lowest: int | None,
        limit: int,
    ) -> tuple[list[IndexKey], bool]:
        """Up to `limit` keys of `runs` merged, newest first, below `upper` and
        from `lowest` µs up; True when nothing follows them."""
        minimum = (lowest, "") if lowest is not None else None
        iterators = [
            run.irange(minimum, upper, inclusive=(True, False), reverse=True) for run in runs
        ]
        merged: Iterator[IndexKey] = heapq.merge(*iterators, reverse=True)
        keys = list(itertools.islice(merged, limit + 1))
        return keys[:limit], len(keys) <= limit
