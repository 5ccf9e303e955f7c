"""The Redis store: RedisStore, the Store front over RedisEngine.

Modules: `urls` (parsing --redis-url), `pools` (the pools of each topology),
`packing`, `connection` (pools, scripts and the notifier of one store,
errors translated), `notify` (pub/sub wake-ups), `scripts` (the Lua files),
`calls` (one script call with declared keys), `hints`, `codec` (replies to
the model), `ids` (job ids and their partitions), `partition` (the
transitions of one hash tag) and `engine` (the deployment over 1..N
partitions).
"""

from __future__ import annotations

from store.front import StoreFront
from store.model import StoreSettings
from store.redis.engine import RedisEngine


class RedisStore(StoreFront):
    """The Store protocol on Redis over `partitions` hash tags (see store/redis/engine.py)."""

    engine: RedisEngine

    def __init__(
        self,
        url: str,
        settings: StoreSettings,
        partition: str = "default",
        partitions: int = 1,
        hear_ready: bool = True,
        hear_changes: bool = True,
    ) -> None:
        engine = RedisEngine(
            url,
            settings,
            partition=partition,
            partitions=partitions,
            hear_ready=hear_ready,
            hear_changes=hear_changes,
        )
        super().__init__(engine)


__all__ = ["RedisEngine", "RedisStore"]
