"""The fault harness (tests/faults/rig.py) on a Redis Cluster: the same servers, workers,
client and ledger; only the evidence is read through a cluster client, since the
partition's slot may change master during the test."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis

from store.keys import Keys
from tests.cluster_servers import ClusterDeployment
from tests.faults.rig import FAULT_SETTINGS, Rig


class ClusterRig(Rig):
    def __init__(
        self,
        workdir: Path,
        cluster: ClusterDeployment,
        settings: Mapping[str, str] = FAULT_SETTINGS,
        **options: Any,
    ) -> None:
        super().__init__(workdir, cluster.nodes[0], settings, redis_url=cluster.url, **options)
        self.cluster = cluster

    @property
    def slot(self) -> int:
        """The slot of the rig's partition (every key and the notify channel)."""
        return self.cluster.slot_of(Keys(self.partition).notify)

    def redis_client(self) -> redis.Redis:
        node = self.cluster.alive[0]
        client = redis.RedisCluster(host="127.0.0.1", port=node.port, socket_timeout=10)
        return client  # type: ignore[return-value]  # the same commands, one slot

    def failed_calls(self, since: float) -> dict[str, int]:
        """Codes of the client's calls that started after `since` (time.time()) and failed."""
        codes: dict[str, int] = {}
        for call in self.calls:
            if call.start >= since and call.code != "OK":
                codes[call.code] = codes.get(call.code, 0) + 1
        return codes

    def first_success_after(self, method: str, since: float) -> float | None:
        """time.time() at which the first `method` call started after `since` succeeded."""
        starts = [c.start for c in self.calls if c.method == method and c.code == "OK"]
        later = [start for start in starts if start > since]
        return min(later) if later else None

    def longest_gap(self, method: str) -> float:
        """The longest time between two successful `method` calls' answers (seconds)."""
        ends = sorted(c.end for c in self.calls if c.method == method and c.code == "OK")
        return max((later - earlier for earlier, later in itertools.pairwise(ends)), default=0.0)
