"""The journal: an in-memory store's state kept in a SQLite file (`serve --data-dir`).

Generic over the store's record and event dataclasses; nothing here knows
jobs. Modules:
- codec.py: a dataclass as a row, derived from its fields (UNLOADED blobs).
- schema.py: the tables, the version, the checks at open (header, newer file).
- lock.py: one process per directory (flock).
- writer.py: the writing connection on its own thread: commit, load, TTL,
  audit cap, checkpoints, room left.
- journal.py: marks, group commit (`settled`), the disk reserve, divergence.
- reader.py: the audit trail, read-only, while a server runs.
The embedded store's use of it is store/memory/durable.py.
"""

from __future__ import annotations

from store.journal.codec import UNLOADED, RowCodec, Unloaded
from store.journal.errors import DataDirRefused
from store.journal.journal import DEFAULT_RESERVE, Journal
from store.journal.reader import EventReader
from store.journal.schema import DB_NAME, SCHEMA_VERSION, Tables
from store.journal.writer import SYNC_MODES, Loaded

__all__ = [
    "DB_NAME",
    "DEFAULT_RESERVE",
    "SCHEMA_VERSION",
    "SYNC_MODES",
    "UNLOADED",
    "DataDirRefused",
    "EventReader",
    "Journal",
    "Loaded",
    "RowCodec",
    "Tables",
    "Unloaded",
]
