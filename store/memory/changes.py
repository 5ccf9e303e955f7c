"""What the embedded store's state tells its persistence, if any: the `Changes` sink.

The rule that keeps the file equal to memory with no code per transition:
every status change goes through `State.emit`, which hands the record and
its event to `emitted` (the record, and its parent's, are rewritten whole at
the next commit). A change WITHOUT an event must call `touched` itself; today
there are three: a heartbeat (lazy: DESIGN lets it be persisted up to a
second late), a group's children getting the parent's expiry, and a retry
back-off ending. `payload` is how the state reads a payload, which a durable
store may have left on disk.

In memory (`IN_MEMORY`) all of it is a no-op; store/memory/durable.py is the
journal's implementation.
"""

from __future__ import annotations

from typing import Protocol

from store.memory.record import Record
from store.model import JobEvent


class Changes(Protocol):
    def emitted(self, record: Record, event: JobEvent) -> None:
        """`record` changed status (`event`): it, its parent and the event persist."""
        ...

    def touched(self, record: Record, lazy: bool = False) -> None:
        """`record` changed without an event; lazy: it may be persisted up to a second late."""
        ...

    def payload(self, record: Record) -> bytes:
        """The record's payload (read back from disk if it was left there)."""
        ...


class _InMemory:
    def emitted(self, record: Record, event: JobEvent) -> None:
        return None

    def touched(self, record: Record, lazy: bool = False) -> None:
        return None

    def payload(self, record: Record) -> bytes:
        return record.payload


IN_MEMORY: Changes = _InMemory()
