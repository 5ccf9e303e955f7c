"""Redis commands by name from INFO commandstats, and their per-job deltas.

INFO counts every command Redis ran, the ones a Lua script calls included,
so these figures are Redis work per job; the round trips (what a client
sent) are counted by bench.monitor instead.
"""

from __future__ import annotations

import re
from collections import Counter

from tests.redis_server import RedisServer

_LINE = re.compile(r"^cmdstat_([a-z|_-]+):calls=(\d+)", re.MULTILINE)
# The benchmark's own reads of INFO are not the system's work.
_OURS = frozenset({"info"})


def commandstats(server: RedisServer) -> Counter[str]:
    text = server.command("INFO", "commandstats").decode()
    return Counter({name: int(calls) for name, calls in _LINE.findall(text) if name not in _OURS})


def per_job(before: Counter[str], after: Counter[str], jobs: int) -> dict[str, float]:
    """Commands per job by name, largest first."""
    delta = after - before
    return {name: count / jobs for name, count in delta.most_common()}


def describe(commands: dict[str, float], top: int = 6) -> str:
    """'72.2; evalsha 3.00; hset 6.00, ...': the total, the scripts run, the biggest names."""
    total = sum(commands.values())
    scripts = commands.get("evalsha", 0.0) + commands.get("eval", 0.0)
    biggest = [(name, value) for name, value in commands.items() if name != "evalsha"][:top]
    parts = ", ".join(f"{name} {value:.2f}" for name, value in biggest)
    return f"{total:.1f}; evalsha {scripts:.2f}; {parts}"
