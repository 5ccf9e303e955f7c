"""Recovery of one partition: what is due is handled in batches of RECOVER_BATCH.

The recovery leader (serving/recovery.py) calls this for every partition,
one after another: each script handles up to RECOVER_BATCH due items of
its index (store/lua/recover_*.lua) and stops before an id it did not
declare; the next call declares it.
"""

from __future__ import annotations

from collections.abc import Sequence

from store.errors import StoreError
from store.keys import Declared
from store.model import JobEvent
from store.redis.calls import DECLARE_ROUNDS, ScriptCall, declare_needed
from store.redis.codec import event_from_emitted
from store.redis.partition import Partition
from store.redis.scripts import ArgValue

# Due items handled per recovery script call.
RECOVER_BATCH = 100


async def recover(part: Partition) -> list[JobEvent]:
    """Every due item of one partition: run timeouts, expired leases, retries, queue timeouts."""
    events: list[JobEvent] = []
    for name, extra in (
        ("recover_run_timeouts", part.backoff()),
        ("recover_leases", []),
        ("recover_retries", []),
        ("recover_queue_timeouts", []),
    ):
        events += await _recover_all(part, name, extra)
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
