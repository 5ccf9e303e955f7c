"""A private Redis Cluster of real redis-server processes, for the tests in tests/cluster/.

Each node runs from its own temp dir on a free port (tests/redis_server.py)
with `--cluster-enabled yes` and its own cluster config file (nodes.conf);
`redis-cli --cluster create` assigns the slots and the replicas. A short
`cluster-node-timeout` makes a replica take over a killed master in seconds.
`SlotMigration` moves one slot by hand, step by step, as `redis-cli --cluster
reshard` would, so a test can move a partition's slot while calls run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.redis_server import RedisServer

NODE_TIMEOUT_MS = 1000
READY_TIMEOUT = 30.0
MIGRATE_TIMEOUT_MS = 5000
SLOTS = 16384
# `redis-cli --cluster create` refuses fewer masters; fewer get their slots by hand.
CREATE_MIN_MASTERS = 3


def require_redis_cli() -> str:
    """Path of redis-cli; skip without it, but fail under JOBGATE_REQUIRE_REDIS=1."""
    path = shutil.which("redis-cli")
    if path is None:
        message = "redis-cli is not on PATH (needed to create a Redis Cluster)"
        if os.environ.get("JOBGATE_REQUIRE_REDIS") == "1":
            pytest.fail(message + " (JOBGATE_REQUIRE_REDIS=1)")
        pytest.skip(message)
    return path


def cluster_node_args(workdir: Path) -> tuple[str, ...]:
    return (
        "--cluster-enabled", "yes",
        "--cluster-config-file", str(workdir / "nodes.conf"),
        "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        # A replica may always take over, however long it was cut off: the
        # tests kill a master right after writing.
        "--cluster-replica-validity-factor", "0",
        "--cluster-allow-replica-migration", "no",
        "--repl-diskless-sync-delay", "0",
    )  # fmt: skip


class ClusterDeployment:
    """`masters` masters with `replicas` replicas each; `url` is the redis+cluster:// URL.

    One or two masters are allowed without replicas (the benchmark compares
    one master with three).
    """

    def __init__(self, workdir: Path, masters: int = 3, replicas: int = 0) -> None:
        if masters < CREATE_MIN_MASTERS and replicas:
            raise ValueError(f"replicas need {CREATE_MIN_MASTERS} masters or more")
        self.cli = require_redis_cli()
        self.workdir = workdir
        self.masters = masters
        self.replicas = replicas
        self.nodes: list[RedisServer] = []
        for index in range(masters * (1 + replicas)):
            node_dir = workdir / f"node{index}"
            self.nodes.append(RedisServer(node_dir, *cluster_node_args(node_dir)))

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def alive(self) -> list[RedisServer]:
        return [node for node in self.nodes if node.process and node.process.poll() is None]

    def start(self) -> ClusterDeployment:
        """Start every node and create the cluster; on failure stop them all and re-raise."""
        try:
            for node in self.nodes:
                node.start()
            if self.masters < CREATE_MIN_MASTERS:
                self._assign_slots_by_hand()
            else:
                addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
                subprocess.run(
                    [self.cli, "--cluster", "create", *addresses,
                     "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                    check=True, capture_output=True, timeout=60,
                )  # fmt: skip
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _assign_slots_by_hand(self) -> None:
        """Each master its even share of the slots, then every node meets the first
        (what `--cluster create` does, for the 1 or 2 masters it refuses)."""
        for index, node in enumerate(self.nodes):
            first, end = index * SLOTS // self.masters, (index + 1) * SLOTS // self.masters
            with self.client(node) as client:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, end - 1)
        with self.client(self.nodes[0]) as client:
            for node in self.nodes[1:]:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)

    def client(self, node: RedisServer) -> redis.Redis:
        return redis.Redis(port=node.port, socket_timeout=2, decode_responses=True)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until every live node says cluster_state:ok, all 16384 slots are covered by
        live masters, and every live node agrees who serves each slot."""
        self.wait(self._ready, "the cluster to be ready", timeout)

    def _ready(self) -> bool:
        maps = []
        for node in self.alive:
            with self.client(node) as client:
                info = _fields(client.execute_command("CLUSTER", "INFO"))
                if info.get("cluster_state") != "ok" or int(info["cluster_slots_ok"]) != SLOTS:
                    return False
                maps.append(self._slot_map(client))
        alive_ports = {node.port for node in self.alive}
        first = maps[0]
        return all(m == first for m in maps) and set(first.values()) <= alive_ports

    @staticmethod
    def _slot_map(client: redis.Redis) -> dict[tuple[int, int], int]:
        """(first slot, last slot) -> the master's port, as this node sees it."""
        ranges = client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
        return {(int(r[0]), int(r[1])): int(r[2][1]) for r in ranges}

    def slot_of(self, key: str) -> int:
        with self.client(self.alive[0]) as client:
            return int(client.execute_command("CLUSTER", "KEYSLOT", key))

    def owner(self, slot: int) -> RedisServer:
        """The master serving `slot`, as the first live node sees it."""
        with self.client(self.alive[0]) as client:
            for (first, last), port in self._slot_map(client).items():
                if first <= slot <= last:
                    return self.by_port(port)
        raise LookupError(f"slot {slot} is not served")

    def by_port(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def node_id(self, node: RedisServer) -> str:
        with self.client(node) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    def primaries(self) -> list[RedisServer]:
        with self.client(self.alive[0]) as client:
            ports = set(self._slot_map(client).values())
        return [self.by_port(port) for port in sorted(ports)]

    def kill(self, node: RedisServer) -> None:
        """SIGKILL, as a crash would."""
        node.kill()

    def wait_promoted(self, slot: int, old: RedisServer, timeout: float = READY_TIMEOUT) -> float:
        """Seconds until a live node other than `old` serves `slot` and the cluster is ok."""
        start = time.monotonic()

        def promoted() -> bool:
            return self.owner(slot) is not old and self._ready()

        self.wait(promoted, f"a replica to take over slot {slot}", timeout)
        return time.monotonic() - start

    def wait(self, check: Callable[[], bool], what: str, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() >= deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _fields(text: str) -> dict[str, str]:
    """CLUSTER INFO's "name:value" lines."""
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {name: value.strip() for name, value in pairs}


class SlotMigration:
    """One slot moved from its master to `target` by hand, in steps a test interleaves with load.

    `begin()` marks the slot IMPORTING on the target and MIGRATING on the
    source; `move_batch()` MIGRATEs up to `batch` of its keys (clients meanwhile
    get ASK for keys already moved, TRYAGAIN for a call spanning both sides);
    `finish()` moves what is left and hands the slot to the target on every master.
    """

    def __init__(self, cluster: ClusterDeployment, slot: int, target: RedisServer) -> None:
        self.cluster = cluster
        self.slot = slot
        self.source = cluster.owner(slot)
        if self.source is target:
            raise ValueError("the slot is on the target already")
        self.target = target
        self.moved = 0

    def begin(self) -> None:
        source_id = self.cluster.node_id(self.source)
        target_id = self.cluster.node_id(self.target)
        with self.cluster.client(self.target) as client:
            client.execute_command("CLUSTER", "SETSLOT", self.slot, "IMPORTING", source_id)
        with self.cluster.client(self.source) as client:
            client.execute_command("CLUSTER", "SETSLOT", self.slot, "MIGRATING", target_id)

    def move_batch(self, batch: int = 10) -> int:
        """MIGRATE up to `batch` keys of the slot; how many moved (0: none left)."""
        with self.cluster.client(self.source) as client:
            keys = client.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, batch)
            if keys:
                client.execute_command(
                    "MIGRATE", "127.0.0.1", self.target.port, "", 0, MIGRATE_TIMEOUT_MS,
                    "KEYS", *keys,
                )  # fmt: skip
        self.moved += len(keys)
        return len(keys)

    def finish(self) -> None:
        while self.move_batch(100):
            pass
        target_id = self.cluster.node_id(self.target)
        # The target first, so the slot is never left without an owner that
        # accepts it; then the source (which stops serving it) and the rest.
        ordered = [self.target, self.source] + [
            node
            for node in self.cluster.primaries()
            if node is not self.target and node is not self.source
        ]
        for node in ordered:
            with self.cluster.client(node) as client:
                client.execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", target_id)
        self.cluster.wait(
            lambda: self.cluster.owner(self.slot) is self.target and self.cluster._ready(),
            f"slot {self.slot} to be served by the target everywhere",
        )
