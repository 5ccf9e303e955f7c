"""The benchmark's no-op handler: one RPUSH of its timestamps per job.

The payload starts with the submit call's start time (epoch seconds, then a
space), written by bench.producer. The handler pushes "<submitted> <started>
<finished>" to DONE_KEY on the timing sink Redis named by SINK_ENV; the
benchmark reads completions and latencies from that list. The sink is its
own redis-server, so jobgate's Redis figures (commands, CPU) exclude it.
"""

from __future__ import annotations

import os
import threading
import time

import redis

from jobgate import JobContext

SINK_ENV = "JOBGATE_BENCH_SINK"
DONE_KEY = "bench:done"

_lock = threading.Lock()
_clients: dict[str, redis.Redis] = {}


def _sink() -> redis.Redis:
    # One client per process, made on first use (handlers run in worker threads).
    url = os.environ[SINK_ENV]
    with _lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(url)
        return _clients[url]


def stamp(submitted: float) -> bytes:
    """The payload prefix the handler reads back."""
    return f"{submitted:.6f} ".encode()


def noop(ctx: JobContext) -> bytes:
    started = time.time()
    submitted = ctx.payload.split(b" ", 1)[0].decode()
    _sink().rpush(DONE_KEY, f"{submitted} {started:.6f} {time.time():.6f}")
    return b""
