"""CPU seconds, RSS and thread counts of processes, read from /proc (no psutil)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used (all its threads)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # The command name in parentheses may hold spaces: split after its ')'.
    fields = text.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / _TICKS


def rss_and_threads(pid: int) -> tuple[int, int]:
    """(resident set size in bytes, thread count) of the process."""
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads


def cpu_snapshot(pids: Mapping[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def cpu_delta(before: Mapping[str, float], pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds each process used since `before`."""
    return {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
