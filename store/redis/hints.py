"""What a job's next transitions touch, learned from replies, so calls declare it at once.

Every key a script touches is declared in KEYS (store/lua/includes/
declared.lua); a script that meets one it was not given asks for it and is
called again. These hints keep the hot path at one round trip: a job's
parent, model and idempotency key (from any reply that carried the job),
the ids at the heads of a claim's queues (from the claim's answer), and the
ids last heard becoming claimable ("r" messages). A stale hint costs a
round, never a wrong answer. One `Hints` serves every partition of a store:
job ids are unique across partitions, the rest is keyed by partition.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

from store.keys import Declared, Keys
from store.model import ClaimedJob, Job, JobKind, Priority

# Per job, what its next transitions touch, for this many jobs.
JOB_HINTS = 10_000
# Per model, the ids of the last jobs heard becoming claimable ("r" messages,
# this store's own submits): the next claim of the model declares them.
READY_HINTS = 8


class Hints:
    def __init__(self) -> None:
        self._floors: dict[tuple[str, Priority], float] = {}
        self._jobs: OrderedDict[str, Declared] = OrderedDict()
        self._heads: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        self._ready: dict[tuple[str, str], deque[str]] = {}

    def learn(self, job: Job, keys: Keys) -> None:
        """Remember what the job's next transitions touch."""
        hint = Declared([job.id, job.parent_id], [job.model])
        if job.idempotency_key and job.kind is not JobKind.CHILD:
            hint.add(raw=[keys.idempotency(job.tenant, job.idempotency_key)])
        hint.add(ids=[child.id for child in job.children])
        self._jobs[job.id] = hint
        self._jobs.move_to_end(job.id)
        while len(self._jobs) > JOB_HINTS:
            self._jobs.popitem(last=False)

    def floor(self, model: str, priority: Priority) -> float:
        """The highest fair-share pass seen handed out for (model, priority), in any partition."""
        return self._floors.get((model, priority), 0.0)

    def raise_floor(self, model: str, priority: Priority, score: float) -> None:
        key = (model, priority)
        if score > self._floors.get(key, 0.0):
            self._floors[key] = score

    def handed_out(self, job: Job, flat_record: Sequence[bytes]) -> None:
        """A claimed job's queue score raises the floor (under fair share: weight > 0)."""
        fields = {flat_record[i]: flat_record[i + 1] for i in range(0, len(flat_record), 2)}
        if int(fields.get(b"weight", b"0") or 0) > 0:
            self.raise_floor(job.model, job.priority, float(fields.get(b"seq", b"0") or 0))

    def add_ids(self, job_id: str, ids: Sequence[str]) -> None:
        """More ids the job's end may touch (a claimed child's held siblings)."""
        hint = self._jobs.get(job_id)
        if hint is not None:
            hint.add(ids)

    def heard_ready(self, channel: str, model: str, job_id: str) -> None:
        hints = self._ready.setdefault((channel, model), deque(maxlen=READY_HINTS))
        hints.append(job_id)

    def hinted(self, *job_ids: str) -> Declared:
        """Declare `job_ids` and what was learned they touch."""
        declared = Declared(list(job_ids))
        for job_id in job_ids:
            hint = self._jobs.get(job_id)
            if hint is not None:
                declared.add(hint.ids, hint.models, hint.raw)
        return declared

    def claim_declared(self, keys: Keys, models: list[str], *more: Declared) -> Declared:
        """A claim's declaration: its models, the head ids the last claim saw
        and the ids last heard becoming claimable."""
        heads = self._heads.get((keys.partition, tuple(models)), [])
        declared = Declared(list(heads), list(models))
        for model in models:
            declared.add(self._ready.get((keys.notify, model), ()))
        for extra in more:
            declared.add(extra.ids, extra.models, extra.raw)
        return declared

    def heads_seen(
        self, keys: Keys, models: list[str], heads: Sequence[str], claimed: list[ClaimedJob]
    ) -> None:
        """The next claim of `models` declares the heads seen now, and the
        parents of the children just claimed (their siblings queue next)."""
        parents = [c.job.parent_id for c in claimed if c.job.parent_id]
        self._heads[(keys.partition, tuple(models))] = [*heads, *dict.fromkeys(parents)]
