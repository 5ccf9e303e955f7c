"""Every Redis key name jobgate uses, spelled in this one module.

All keys of one partition share the hash tag `{<partition>}` so every script
touches a single slot (Redis Cluster safe). No script builds a key: every key
a script touches is passed in KEYS, named here. Per-job and per-model keys go
in fixed groups (`job_group`, `model_group`) that store/lua/includes/
declared.lua maps back to the job ids and models listed in ARGV.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from store.model import Priority
from store.policy import class_parts

#: A partition name (the hash tag); the servers check --redis-partition with it.
PARTITION_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: --redis-partitions' range: how many hash tags one deployment spreads over.
MAX_PARTITIONS = 1024
# A hash tag: the name alone (one partition) or "<name>/<index>" (one of
# several; '/' never occurs in a name, so the two forms never collide).
_TAG_PATTERN = re.compile(rf"{PARTITION_PATTERN.pattern}(/[0-9]{{1,4}})?")


def partition_tags(name: str, count: int) -> list[str]:
    """The hash tags of a deployment named `name` over `count` partitions.

    One partition keeps the bare name, so a deployment that never set
    --redis-partitions keeps its keys; more use "<name>/0" .. "<name>/<count-1>".
    """
    if not 1 <= count <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be 1..{MAX_PARTITIONS}, got {count}")
    if count == 1:
        return [name]
    return [f"{name}/{index}" for index in range(count)]


# Per-job key suffixes, after `<prefix>job:<id>`.
_PAYLOAD = ":payload"
_RESULT = ":result"
_CHILDREN = ":children"
_HELD = ":held"


class Keys:
    """Key names for one partition: `jobgate:{<partition>}:...`."""

    def __init__(self, partition: str) -> None:
        if not _TAG_PATTERN.fullmatch(partition):
            raise ValueError(f"partition must match {PARTITION_PATTERN.pattern}, got {partition!r}")
        self.partition = partition
        self.prefix = f"jobgate:{{{partition}}}:"

    # Per job -----------------------------------------------------------------
    def job(self, job_id: str) -> str:
        """Hash: the job record."""
        return f"{self.prefix}job:{job_id}"

    def payload(self, job_id: str) -> str:
        """String: the job's input bytes."""
        return self.job(job_id) + _PAYLOAD

    def result(self, job_id: str) -> str:
        """String: the job's result bytes."""
        return self.job(job_id) + _RESULT

    def children(self, job_id: str) -> str:
        """List: a group's child ids in index order."""
        return self.job(job_id) + _CHILDREN

    def held(self, job_id: str) -> str:
        """Sorted set: a group's HELD child ids scored by child index."""
        return self.job(job_id) + _HELD

    def idempotency(self, tenant: str, key: str) -> str:
        """String "<fingerprint> <job id>". The tenant is length-prefixed so
        ("a:b", "c") and ("a", "b:c") never collide."""
        return f"{self.prefix}idem:{len(tenant)}:{tenant}:{key}"

    def op(self, op_id: str) -> str:
        """String, short TTL: what one transition call did, so a resend of the
        same call answers from it instead of running again (the last KEY of
        submit, claim, cancel and set_result; see includes/once.lua)."""
        return f"{self.prefix}op:{op_id}"

    # Per model -----------------------------------------------------------------
    def queue(self, model: str, priority: Priority, pool: str = "") -> str:
        """Sorted set: claimable job ids of (model, priority) bound to `pool` ("" = any
        pool, the name every queue had before pools) scored by queue score (seq)."""
        name = f"{self.prefix}queue:{model}:{int(priority)}"
        return f"{name}:{pool}" if pool else name

    def fair(self, model: str) -> str:
        """Hash: the model's fair-share state per priority: "floor:<p>" (the pass last
        handed out) and "pass:<p>:<tenant>" (the tenant's last pass)."""
        return f"{self.prefix}fair:{model}"

    # Partition-wide ------------------------------------------------------------
    @property
    def events(self) -> str:
        """Stream: the audit trail, capped (MAXLEN ~)."""
        return self.prefix + "events"

    @property
    def leases(self) -> str:
        """Sorted set: PROCESSING job ids scored by lease deadline (ms)."""
        return self.prefix + "leases"

    @property
    def run_deadlines(self) -> str:
        """Sorted set: PROCESSING job ids scored by run-timeout deadline (ms)."""
        return self.prefix + "run_deadlines"

    @property
    def retries(self) -> str:
        """Sorted set: QUEUED-but-delayed job ids scored by when they become claimable (ms)."""
        return self.prefix + "retries"

    @property
    def queue_timeouts(self) -> str:
        """Sorted set: QUEUED job ids scored by queue-timeout deadline (ms)."""
        return self.prefix + "queue_timeouts"

    @property
    def live(self) -> str:
        """Hash: tenant -> live (held+queued+processing) job count."""
        return self.prefix + "live"

    @property
    def live_total(self) -> str:
        """String: live job count over all tenants."""
        return self.prefix + "live_total"

    @property
    def in_flight(self) -> str:
        """Hash: model -> PROCESSING job count."""
        return self.prefix + "in_flight"

    @property
    def models(self) -> str:
        """Set: every queue class (store.policy.queue_class) ever submitted to
        (queue_depths, in_flight)."""
        return self.prefix + "models"

    @property
    def seq(self) -> str:
        """String: the last queue score handed out: max(last + 1, Redis TIME in µs)."""
        return self.prefix + "seq"

    @property
    def settings(self) -> str:
        """Hash: what a deployment fixes for its life (fair_share), set by the first server."""
        return self.prefix + "settings"

    @property
    def workers(self) -> str:
        """Hash: worker id -> its pool and models (JSON). The worker registry
        (store/workers.py); a deployment keeps it in partition 0 only."""
        return self.prefix + "workers"

    @property
    def workers_seen(self) -> str:
        """Sorted set: worker id scored by when it was last seen (ms); partition 0 only."""
        return self.prefix + "workers_seen"

    @property
    def leader(self) -> str:
        """String: the recovery leader's holder id, with a PX expiry."""
        return self.prefix + "leader"

    @property
    def notify(self) -> str:
        """Pub/sub channel (not a key) of the ready messages: "r <model> <id>".

        Claims wait for these (the worker-server). The name is the one every
        message went on before the changes channel existed, so a claim on a
        server of that version still wakes during a rolling upgrade. It
        carries the partition's hash tag: on Cluster the scripts SPUBLISH on
        it, which Redis allows only for a channel in the script's slot."""
        return self.prefix + "notify"

    @property
    def changes(self) -> str:
        """Pub/sub channel (not a key) of the change messages: "j <job id>", "q <model>".

        Watchers and event follows wait for these (the gateway); apart from
        `notify` so a server that only claims never reads them. Same hash
        tag, so SPUBLISH on Cluster stays in the script's slot."""
        return self.prefix + "changes"

    # ListJobs' indexes (store/lua/includes/index.lua, docs/list-jobs.md) ------
    @property
    def index_status(self) -> str:
        """Sorted set, every score 0: "<tenant>|<status><kind><create ms><id>", one
        member per job; a (tenant, status, kind) run is one member prefix."""
        return self.prefix + "index:status"

    @property
    def index_expiring(self) -> str:
        """List: "<due ms> <index_status member> <model>" per job given a TTL, in order."""
        return self.prefix + "index:expiring"

    def index_model(self, tenant: str, model: str) -> str:
        """Sorted set, every score 0: "<create ms><id>" of the tenant's jobs of the model.
        Neither a tenant nor a model name holds ':', so the pair is unambiguous."""
        return f"{self.prefix}index:model:{tenant}:{model}"

    def index_keys(self) -> list[str]:
        """The fixed index keys every transition script gets just before its declared
        groups (includes/index.lua finds them there)."""
        return [self.index_status, self.index_expiring]

    def job_group(self, job_id: str) -> list[str]:
        """The keys declared per job id, in includes/declared.lua's order."""
        job = self.job(job_id)
        return [job, job + _PAYLOAD, job + _RESULT, job + _CHILDREN, job + _HELD]

    def model_group(self, job_class: str) -> list[str]:
        """The keys declared per queue class (store.policy.queue_class): its ready
        queues, priority 1, 2, 3, then its model's fair-share hash."""
        model, pool = class_parts(job_class)
        queues = [self.queue(model, priority, pool) for priority in sorted(Priority)]
        return [*queues, self.fair(model)]

    def declared_keys(self, declared: Declared) -> list[str]:
        """KEYS for `declared`: its job groups, its model groups, its raw keys."""
        keys = [key for job_id in declared.ids for key in self.job_group(job_id)]
        keys += [key for model in declared.models for key in self.model_group(model)]
        return keys + declared.raw

    def transition_keys(self) -> list[str]:
        """KEYS[1..10] of every transition script, in the order common.lua names them."""
        return [
            self.events,
            self.leases,
            self.run_deadlines,
            self.retries,
            self.queue_timeouts,
            self.live,
            self.live_total,
            self.in_flight,
            self.models,
            self.seq,
        ]


@dataclass
class Declared:
    """The job ids, models and raw keys (keys a record names, such as a job's
    idempotency key) one script call declares (includes/declared.lua)."""

    ids: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    _seen: set[tuple[int, str]] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        ids, models, raw = self.ids, self.models, self.raw
        self.ids, self.models, self.raw = [], [], []
        self.add(ids, models, raw)

    def add(
        self, ids: Iterable[str] = (), models: Iterable[str] = (), raw: Iterable[str] = ()
    ) -> bool:
        """Declare more (each once, in order); True if anything was new."""
        before = len(self._seen)
        for kind, (mine, more) in enumerate(
            ((self.ids, ids), (self.models, models), (self.raw, raw))
        ):
            for item in more:
                if item and (kind, item) not in self._seen:
                    self._seen.add((kind, item))
                    mine.append(item)
        return len(self._seen) > before

    def tail(self, key_at: int) -> list[str | int]:
        """The ARGV tail: ids, models, then the KEYS index (1-based) of the
        first job group, and the three counts."""
        return [
            *self.ids,
            *self.models,
            key_at,
            len(self.ids),
            len(self.models),
            len(self.raw),
        ]
