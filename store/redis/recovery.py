"""Recovery of one partition: what is due is handled in batches of RECOVER_BATCH.

The recovery leader (serving/recovery.py) calls this for every partition,
one after another: each script handles up to RECOVER_BATCH due items of
its index (store/lua/recover_*.lua) and stops before an id it did not
declare; the next call declares it.

First one pipeline asks every partition which of its indexes hold
something due (recover_due.lua, by the store's clock), and only those
scripts run: a step a few times a second with nothing due cost four
transition scripts and a read per partition (12 partitions: 48 scripts a
step, over half of what the leading gateway's CPU a job grew from 1 to 12
partitions, one Submit at a time: docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from store.errors import StoreError
from store.keys import Declared, Keys
from store.model import JobEvent
from store.redis.calls import DECLARE_ROUNDS, ScriptCall, declare_needed
from store.redis.codec import event_from_emitted
from store.redis.connection import Connection
from store.redis.partition import Partition
from store.redis.scripts import ArgValue

# Due items handled per recovery script call.
RECOVER_BATCH = 100


#: The recovery scripts, in the order they run, with the index each one drains
#: (recover_due.lua's KEYS[1..4]: keep the two in step).
SCRIPTS = ("recover_run_timeouts", "recover_leases", "recover_retries", "recover_queue_timeouts")


@dataclass(frozen=True)
class Due:
    """What recover_due.lua found due in one partition."""

    scripts: tuple[str, ...]  # those of SCRIPTS whose index holds a due id
    expiring: bool  # index:expiring's head is due (the ListJobs drain)

    @property
    def anything(self) -> bool:
        return bool(self.scripts) or self.expiring


async def due(connection: Connection, parts: Sequence[Partition]) -> list[Due]:
    """Each partition's Due, in one pipeline (at once on Cluster), on recovery's pool."""
    calls: list[tuple[Sequence[str], Sequence[ArgValue]]] = [
        (_due_keys(part.keys), []) for part in parts
    ]
    replies = await connection.run_pipelined("recover", "recover_due", calls, connection.control)
    return [_due(reply) for reply in replies]


def _due_keys(keys: Keys) -> list[str]:
    # recover_due.lua's KEYS: SCRIPTS' indexes in their order, then index:expiring
    indexes = [keys.run_deadlines, keys.leases, keys.retries, keys.queue_timeouts]
    return [*indexes, keys.index_expiring]


def _due(reply: Sequence[Any]) -> Due:
    *scripts, expiring = [bool(int(flag)) for flag in reply]
    return Due(tuple(name for name, flag in zip(SCRIPTS, scripts, strict=True) if flag), expiring)


async def recover(part: Partition, due: Due) -> list[JobEvent]:
    """Every due item of one partition: run timeouts, expired leases, retries, queue
    timeouts, then the ListJobs drain; only what `due` found due (an item falling
    due meanwhile waits for the next step)."""
    events: list[JobEvent] = []
    for name in due.scripts:
        extra = part.backoff() if name == "recover_run_timeouts" else []
        events += await _recover_all(part, name, extra)
    if due.expiring:
        await part.lister.drain(part.connection.control)
    return events


async def _recover_all(part: Partition, name: str, extra: Sequence[ArgValue]) -> list[JobEvent]:
    """Run one recovery script until nothing is due, in batches of RECOVER_BATCH.

    A batch stops before a due id it did not declare (includes/recover.lua);
    the next call declares what it asked for. DECLARE_ROUNDS calls in a
    row that handle nothing fail the call.
    """
    events: list[JobEvent] = []
    call = ScriptCall(
        name, [RECOVER_BATCH, *extra], operation="recover", client=part.connection.control
    )
    stalls = 0
    while True:
        handled, emitted, needed = await part.call_once(call)
        events.extend(event_from_emitted(entry) for entry in emitted)
        if any(needed):
            stalls = 0 if handled else stalls + 1
            if stalls >= DECLARE_ROUNDS:
                raise StoreError(
                    f"{name}.lua still met undeclared keys after {DECLARE_ROUNDS} calls"
                )
            declare_needed(name, call.declared, needed)
        elif handled < RECOVER_BATCH:
            return events
        else:
            call.declared = Declared()
