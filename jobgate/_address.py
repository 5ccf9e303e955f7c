"""HOST:PORT as a listener is given it: shared by the servers and the web console.

A format, like jobgate._logs: `serving` may import it (tests/test_import_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
