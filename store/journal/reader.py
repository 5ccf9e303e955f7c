"""The audit trail of a data directory, read-only: `jobgate events --data-dir DIR`.

A read-only SQLite connection: WAL lets it read committed events while
`jobgate serve` writes the same file, and it takes no lock on the
directory. It answers the two reads `jobgate events` makes of a Store
(`events`, with `block` polling the file for new rows).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from store.errors import StoreUnavailable
from store.journal.codec import RowCodec
from store.journal.errors import DataDirRefused
from store.journal.schema import DB_NAME, check_header

#: How often a blocking read looks for new rows.
POLL_INTERVAL = 0.2


class EventReader:
    """Events of one data directory, oldest first (see the module docstring)."""

    def __init__(self, directory: Path, codec: RowCodec[Any]) -> None:
        self.directory = directory
        self.path = directory / DB_NAME
        self._codec = codec
        self._query = (
            f"SELECT {', '.join(codec.names)} FROM events WHERE id > ? ORDER BY id LIMIT ?"
        )
        self._con: sqlite3.Connection | None = None

    async def open(self) -> None:
        if not self.path.is_file():
            raise DataDirRefused(f"--data-dir {self.directory} holds no jobgate data ({DB_NAME})")
        check_header(self.path)
        try:
            self._con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            self._con.execute("SELECT 1 FROM events LIMIT 1").fetchall()
        except sqlite3.Error as error:
            raise DataDirRefused(f"{self.path}: cannot read its events ({error})") from None

    async def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[Any]:
        """Up to `count` events after position `after`; with `block`, wait that long for one."""
        start = int(after.split("-", 1)[0])
        deadline = time.monotonic() + (block.total_seconds() if block else 0.0)
        while True:
            found = self._read(start, count)
            if found or time.monotonic() >= deadline:
                return found
            await asyncio.sleep(min(POLL_INTERVAL, max(0.0, deadline - time.monotonic())))

    def _read(self, start: int, count: int) -> list[Any]:
        if self._con is None:
            raise StoreUnavailable("the event reader is closed")
        try:
            rows = self._con.execute(self._query, (start, max(0, count))).fetchall()
        except sqlite3.Error as error:
            raise StoreUnavailable(f"{self.path}: {error}") from None
        return [self._codec.build(row) for row in rows]
