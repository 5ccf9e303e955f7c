"""Count the commands clients send to Redis, with MONITOR, not counting script internals.

INFO's command counters also count every redis.call() inside a Lua script, so
they overstate round trips. MONITOR shows script-internal commands with a
`[<db> lua]` source, which this counter skips.
"""

from __future__ import annotations

import re
import socket
import threading
from collections import Counter

_SCRIPT_SOURCE = re.compile(rb"^\+?\d+\.\d+ \[\d+ lua\]")
_COMMAND = re.compile(rb'^\+\d+\.\d+ \[[^\]]*\] "([A-Za-z]+)"')


class RoundTripCounter:
    """Counts client commands (round trips) seen by MONITOR on one Redis."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self._sock.sendall(b"MONITOR\r\n")
        self._lock = threading.Lock()
        self._commands: Counter[str] = Counter()
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def snapshot(self) -> Counter[str]:
        """Client commands seen so far, by command name."""
        with self._lock:
            return Counter(self._commands)

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
            names = [
                match.group(1).decode().upper()
                for line in lines
                if not _SCRIPT_SOURCE.match(line) and (match := _COMMAND.match(line))
            ]
            with self._lock:
                self._commands.update(names)

    def close(self) -> None:
        self._closed = True
        self._sock.close()
