"""How often a kill -9 right after an acknowledged write loses it (docs/sentinel.md).

    PYTHONPATH=. python -m tests.sentinel.measure_replication_loss [TRIALS]

Per trial: a primary and one in-sync replica of their own, one `SET`
acknowledged (for "wait": followed by `WAIT 1 1000`), the primary killed with
SIGKILL at once, then the replica asked for the key. Not a test: what it
measures is Redis's, and the outcome is a rate, not a guarantee.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import redis

from tests.redis_server import RedisServer

MIN_REPLICAS = ("--min-replicas-to-write", "1", "--min-replicas-max-lag", "1")
MODES = {"default": (), "min-replicas-to-write 1": MIN_REPLICAS, "WAIT 1": ()}


def lost_after_kill(mode: str, workdir: Path) -> bool:
    primary = RedisServer(workdir / "primary", "--repl-diskless-sync-delay", "0", *MODES[mode])
    primary.start()
    replica = RedisServer(workdir / "replica", "--replicaof", "127.0.0.1", str(primary.port))
    replica.start()
    try:
        client = redis.Redis(port=primary.port)
        while not _write(client, "warm"):  # NOREPLICAS until the replica's first ack
            time.sleep(0.05)
        client.set("key", "value")
        if mode == "WAIT 1":
            client.wait(1, 1000)
        primary.kill()
        time.sleep(0.2)  # let the replica read whatever reached it
        return not redis.Redis(port=replica.port).exists("key")
    finally:
        primary.kill()
        replica.kill()


def _write(client: redis.Redis, key: str) -> bool:
    try:
        client.set(key, "1")
    except redis.ResponseError:
        return False
    return True


def main(trials: int) -> None:
    for mode in MODES:
        with tempfile.TemporaryDirectory() as root:
            lost = sum(lost_after_kill(mode, Path(root) / str(n)) for n in range(trials))
        print(f"{mode}: {lost}/{trials} acknowledged writes lost")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
