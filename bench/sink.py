"""The timing sink: a private redis-server the handler pushes completions to."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

import redis

from bench.handlers import DONE_KEY, SINK_ENV
from tests.redis_server import RedisServer


@dataclass(frozen=True)
class Completion:
    submitted: float  # the Submit call's start (epoch seconds)
    started: float  # the handler's start
    finished: float  # the handler's end


class Sink:
    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.client = redis.Redis.from_url(server.url)

    @property
    def env(self) -> dict[str, str]:
        """What a worker process needs to find the sink."""
        return {SINK_ENV: self.server.url}

    def clear(self) -> None:
        self.client.delete(DONE_KEY)

    def count(self) -> int:
        return int(self.client.llen(DONE_KEY))

    def wait_for(self, count: int, timeout: float) -> list[Completion]:
        """Every completion once `count` have arrived; raises after `timeout` s."""
        deadline = time.monotonic() + timeout
        while (seen := self.count()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{seen} of {count} jobs completed in {timeout:.0f}s")
            time.sleep(0.02)
        return self.completions()

    def completions(self) -> list[Completion]:
        rows = self.client.lrange(DONE_KEY, 0, -1)
        return [Completion(*map(float, row.split())) for row in rows]


@contextmanager
def sink() -> Iterator[Sink]:
    with TemporaryDirectory(prefix="jobgate-bench-sink-") as workdir:
        server = RedisServer(Path(workdir))
        server.start()
        try:
            yield Sink(server)
        finally:
            server.stop()
