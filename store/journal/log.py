"""The commit log in front of the SQLite file under `--data-sync normal`.

Why: under `normal` a commit to SQLite cost the event loop about 0.1 ms
(BEGIN, the statements, the WAL's frame writes: five or six 4 KiB pages for
a one-job commit), on the one thread that answers every call. Here a commit
is ONE `write()` of the sealed batch to this file, and the batches logged
over `APPLY_EVERY` are applied to SQLite together, in one transaction that
also records the last sequence number it holds (`APPLIED`, in the meta
table). A process that dies loses nothing written here: the kernel holds
the bytes. A start replays the entries past `APPLIED` into SQLite before
anything reads the file, then empties the log.

Format: entries back to back, each a 16-byte header (body length, CRC-32 of
the body, both big-endian u32; then the sequence number, u64) and the body,
the pickled batch (tuples, lists, dicts, str, bytes, int, float, None; the
unpickler refuses anything else, so a damaged file cannot name code to
run). Sequence numbers are consecutive; a replay stops at the first entry
that is cut short, fails its CRC or breaks the sequence: a write the
kernel never finished (power loss, a full disk) was never acknowledged. A
whole entry that cannot be unpickled stops the start (LogDamaged).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOG_NAME = "jobgate.log"
#: The meta row holding the last sequence number SQLite holds.
APPLIED = "journal.log_applied"
_HEADER = struct.Struct(">IIQ")  # body length, CRC-32 of the body, sequence number


class LogDamaged(Exception):
    """A whole entry (its CRC holds) that cannot be read: it was answered, so a start
    must not go on without it."""


class _PlainUnpickler(pickle.Unpickler):
    """Builtin containers and scalars only: no class or function may be named."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the commit log names {module}.{name}")


def encode(seq: int, batch: Any) -> bytes:
    body = pickle.dumps(batch, protocol=5)
    return _HEADER.pack(len(body), zlib.crc32(body), seq) + body


def entries(data: bytes, after: int) -> Iterator[tuple[int, Any]]:
    """(seq, batch) of the whole, consecutive entries in `data` whose seq is past `after`."""
    offset, expected = 0, None
    wanted = after + 1  # the first entry past `after` must follow it: else one is missing
    while offset + _HEADER.size <= len(data):
        length, crc, seq = _HEADER.unpack_from(data, offset)
        body = data[offset + _HEADER.size : offset + _HEADER.size + length]
        if len(body) < length or zlib.crc32(body) != crc:
            return  # cut short or damaged: never acknowledged
        if expected is not None and seq != expected:
            return
        offset += _HEADER.size + length
        expected = seq + 1
        if seq <= after:
            continue  # SQLite holds it: not even read
        if seq != wanted:
            return
        wanted += 1
        try:
            batch = _PlainUnpickler(io.BytesIO(body)).load()
        except Exception as error:
            raise LogDamaged(f"entry {seq} cannot be read ({error})") from None
        yield seq, batch


class CommitLog:
    """The log file, written from one thread at a time (the journal's caller)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOG_NAME
        self._fd: int | None = None
        self.size = 0  # bytes written since the last empty()

    def read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""

    def open(self) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = os.fstat(self._fd).st_size

    def append(self, entry: bytes) -> None:
        """One write of one entry (a short write, as on a nearly full disk, is
        finished or raises: the entry is acknowledged only whole)."""
        if self._fd is None:
            raise RuntimeError("the commit log is not open")
        view = memoryview(entry)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except BaseException:
            # cut back to the last whole entry: later entries must follow it, not junk
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)
            raise
        self.size += len(entry)

    def empty(self) -> None:
        """Everything logged is in SQLite: start the file again."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
        self.size = 0

    def close(self, remove: bool) -> None:
        """Close; `remove` (everything applied, a clean stop) deletes the file, so a
        directory left by a clean stop holds the SQLite file alone."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if remove:
            self.path.unlink(missing_ok=True)
