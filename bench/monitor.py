"""Count the commands clients send to Redis, with MONITOR, not counting script internals.

INFO's command counters also count every redis.call() inside a Lua script, so
they overstate round trips. MONITOR shows script-internal commands with a
`[<db> lua]` source, which this counter skips.
"""

from __future__ import annotations

import re
import socket
import threading

_SCRIPT_SOURCE = re.compile(rb"^\+?\d+\.\d+ \[\d+ lua\]")


class RoundTripCounter:
    """Counts client commands (round trips) seen by MONITOR on one Redis."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self._sock.sendall(b"MONITOR\r\n")
        self._lock = threading.Lock()
        self._count = 0
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    def _read(self) -> None:
        buffered = b""
        self._sock.settimeout(None)
        while not self._closed:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buffered += chunk
            *lines, buffered = buffered.split(b"\r\n")
            client_lines = sum(
                1 for line in lines if line.startswith(b"+") and line != b"+OK"
                and not _SCRIPT_SOURCE.match(line)
            )  # fmt: skip
            with self._lock:
                self._count += client_lines

    def close(self) -> None:
        self._closed = True
        self._sock.close()
