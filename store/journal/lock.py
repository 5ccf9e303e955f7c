"""One process per data directory: an exclusive flock on DIR/lock, holding the pid.

flock belongs to the open file: the kernel drops it when the process dies
(kill -9 included), so a crash never leaves a stale lock behind, and a
second open in the same process conflicts too (tests rely on that). The
pid written inside is only for the refusal's message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from store.journal.errors import DataDirRefused

LOCK_NAME = "lock"


class DirLock:
    """Held from `acquire` to `release`; a second holder is refused, naming the first."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise DataDirRefused(
                f"--data-dir {self.directory} is in use by another jobgate serve{who}; "
                "one process per directory"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the last descriptor drops the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
