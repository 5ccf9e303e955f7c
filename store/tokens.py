"""Fresh ids for one call: operation keys and lease ids, without a syscall each.

`uuid.uuid4()` reads the kernel's random source (getrandom) once per id: a
claim of 8 made 9 of those calls, each a syscall, even when nothing was
queued. An operation id only has to be unique (a random prefix per process,
then a counter); a lease id is a fencing token another worker must not
guess, so it stays random, but a call's lease ids come from one read.
"""

from __future__ import annotations

import itertools
import os
import secrets

_LEASE_BYTES = 16


def _reset() -> None:
    global _prefix, _counter
    _prefix = secrets.token_hex(8)
    _counter = itertools.count()


_prefix: str
_counter: itertools.count[int]
_reset()
# A forked child would otherwise repeat its parent's ids.
os.register_at_fork(after_in_child=_reset)


def operation_id() -> str:
    """Unique per call: this process's random prefix, then a counter."""
    return f"{_prefix}{next(_counter):x}"


def lease_ids(count: int) -> list[str]:
    """`count` unguessable 128-bit ids (hex), from one read of the random source."""
    if count <= 0:
        return []
    pool = os.urandom(_LEASE_BYTES * count).hex()
    width = 2 * _LEASE_BYTES
    return [pool[index : index + width] for index in range(0, len(pool), width)]
