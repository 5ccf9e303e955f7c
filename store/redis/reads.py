"""What a partition answers without a script: its audit stream and the gauges' counts.

Plain reads on the store's shared connection (one round trip each, or one
pipeline); RedisEngine merges them over partitions (store/redis/events.py
for the stream).
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

from store.errors import InvalidRequest
from store.fields import to_ms
from store.keys import Keys
from store.model import PRIORITIES_IN_CLAIM_ORDER, JobEvent, Priority
from store.policy import class_parts
from store.redis.codec import event_from_fields, record
from store.redis.connection import SOCKET_TIMEOUT, Connection, text, translated

_STREAM_ID = re.compile(r"\d+(-\d+)?")


class PartitionReads:
    """One partition's reads outside the transition scripts."""

    def __init__(self, connection: Connection, keys: Keys) -> None:
        self.connection = connection
        self.keys = keys

    async def events(
        self, after: str = "0", count: int = 100, block: timedelta | None = None
    ) -> list[JobEvent]:
        if not _STREAM_ID.fullmatch(after):
            raise InvalidRequest("after", f"not an event id: {after!r}")
        connection = self.connection
        streams: dict[Any, Any] = {self.keys.events: after}
        connection.check_open()
        with translated("events"):
            if block is None:
                reply: Any = await connection.rpc.xread(streams, count=count)
            else:
                block_ms = max(to_ms(block), 1)
                reply = await asyncio.wait_for(
                    connection.blocking.xread(streams, count=count, block=block_ms),
                    block.total_seconds() + SOCKET_TIMEOUT,
                )
        if not reply:
            return []
        _, entries = reply[0]
        return [
            event_from_fields(entry_id.decode(), {k.decode(): v for k, v in fields.items()})
            for entry_id, fields in entries
        ]

    async def newest_event_id(self) -> str:
        self.connection.check_open()
        with translated("newest_event_id"):
            newest: Any = await self.connection.rpc.xrevrange(self.keys.events, count=1)
        return text(newest[0][0]) if newest else "0"

    async def ready_counts(self) -> dict[tuple[str, Priority, str], int]:
        """Ready jobs per (model, priority, pool)."""
        client = self.connection.rpc
        self.connection.check_open()
        with translated("ready_counts"):
            members: Any = await client.smembers(self.keys.models)
            classes = sorted(class_parts(m.decode()) for m in members)
            queues = [(c, p) for c in classes for p in PRIORITIES_IN_CLAIM_ORDER]
            async with client.pipeline(transaction=False) as pipe:
                for (model, pool), priority in queues:
                    pipe.zcard(self.keys.queue(model, priority, pool))
                sizes = await pipe.execute()
        return {
            (model, priority, pool): int(size)
            for ((model, pool), priority), size in zip(queues, sizes, strict=True)
        }

    async def in_flight(self) -> dict[str, int]:
        client = self.connection.rpc
        self.connection.check_open()
        with translated("in_flight"):
            models: Any = await client.smembers(self.keys.models)
            counts: Any = await client.hgetall(self.keys.in_flight)
        flat = record([item for pair in counts.items() for item in pair])
        result = {class_parts(m.decode())[0]: 0 for m in models}
        for job_class, count in flat.items():  # per queue class: summed per model
            model = class_parts(job_class)[0]
            result[model] = result.get(model, 0) + int(count)
        return result
