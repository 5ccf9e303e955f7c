"""Redis Cluster figures: throughput and each master's CPU per job, 1 or 3 masters x
1 or 12 partitions (--redis-partitions).

Each row is its own cluster (no replicas, no persistence), gateway,
worker-server and one worker process at concurrency 8; the producer keeps 32
Submits in flight (bench.e2e.measure, timed by the sink). On a 2-core
machine every process shares the cores, so throughput cannot grow with the
masters; the masters' CPU split shows whether the partitions spread the work.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bench import servers
from bench.commandstats import commandstats
from bench.e2e import INFLIGHT, Run, measure, ready_worker
from bench.report import table
from bench.sink import Sink
from serving.settings import ServerSettings
from store.keys import Keys, partition_tags
from tests.cluster_servers import ClusterDeployment
from tests.redis_server import RedisServer

MASTERS = (1, 3)
PARTITIONS = (1, 12)
WORKER_CONCURRENCY = 8
INFLIGHT_CALLS = 32
# The client gives every Submit an idempotency key, and a keyed Submit goes to
# its tenant's partition: one tenant's jobs all land in one partition. The
# 12-partition rows are also run with one tenant per call in flight, which is
# what spreads the jobs themselves over the partitions.
SPREAD_TENANTS = INFLIGHT_CALLS
# (masters, partitions, tenants) of each row.
ROWS = [(masters, partitions, tenants)
        for masters in MASTERS for partitions in PARTITIONS
        for tenants in ((1,) if partitions == 1 else (1, SPREAD_TENANTS))]  # fmt: skip
# The masters' CPU columns: as many as the largest cluster has.
MASTER_NAMES = tuple(f"master {index}" for index in range(1, max(MASTERS) + 1))
OTHER_PROCESSES = ("gateway", "worker-server", "worker")


@dataclass(frozen=True)
class ClusterRow:
    masters: int
    partitions: int
    tenants: int
    per_master: tuple[int, ...]  # partitions whose slot each master serves, in port order
    scripts: tuple[float, ...]  # EVALSHA per job on each master, in port order
    run: Run

    @property
    def owners(self) -> int:
        """Distinct masters serving the partitions' slots."""
        return sum(1 for count in self.per_master if count)


def partitions_per_master(cluster: ClusterDeployment, partitions: int) -> tuple[int, ...]:
    """How many of the deployment's partitions (hash tags) each master serves, in port order."""
    name = ServerSettings().redis_partition
    owners = Counter(cluster.owner(cluster.slot_of(Keys(tag).prefix)).port
                     for tag in partition_tags(name, partitions))  # fmt: skip
    return tuple(owners[node.port] for node in cluster.primaries())


def _scripts(node: RedisServer) -> int:
    return commandstats(node)["evalsha"]


def cluster_row(sink: Sink, masters: int, partitions: int, tenants: int, jobs: int) -> ClusterRow:
    model = "bench-cluster"
    with servers.on_cluster(masters, partitions) as (topology, cluster):
        per_master = partitions_per_master(cluster, partitions)
        with ready_worker(topology, sink, model, WORKER_CONCURRENCY) as pids:
            run = Run(topology.name, WORKER_CONCURRENCY, INFLIGHT)
            nodes = cluster.primaries()
            before = [_scripts(node) for node in nodes]
            measure(topology, sink, pids, run, model, jobs,
                    inflight=INFLIGHT_CALLS, tenants=tenants)  # fmt: skip
            scripts = tuple((_scripts(node) - first) / jobs
                            for node, first in zip(nodes, before, strict=True))  # fmt: skip
    return ClusterRow(masters, partitions, tenants, per_master, scripts, run)


def cluster_rows(sink: Sink, jobs: int) -> list[ClusterRow]:
    return [cluster_row(sink, *row, jobs) for row in ROWS]


def _cpu_cell(run: Run, process: str) -> str:
    value = run.cpu_per_1000(process)
    return "-" if value is None else f"{value:.2f}"


def cluster_lines(rows: Sequence[ClusterRow]) -> list[str]:
    cells = [[str(row.masters), str(row.partitions), str(row.tenants), str(row.owners),
              ", ".join(map(str, row.per_master)),
              ", ".join(f"{value:.2f}" for value in row.scripts),
              *([row.run.note, "", ""] if row.run.note else
                [str(row.run.jobs), f"{row.run.seconds:.2f}", f"{row.run.rate:.0f}"]),
              *(_cpu_cell(row.run, name) for name in (*MASTER_NAMES, *OTHER_PROCESSES))]
             for row in rows]  # fmt: skip
    header = ["masters", "partitions", "tenants", "masters owning partitions",
              "partitions per master", "scripts per job by master", "jobs", "seconds", "jobs/s",
              *(f"{name} CPU" for name in (*MASTER_NAMES, *OTHER_PROCESSES))]  # fmt: skip
    return ["## 9. Redis Cluster: throughput and each master's CPU (no persistence, no "
            f"replicas; worker concurrency {WORKER_CONCURRENCY}, {INFLIGHT})", "",
            *table(header, cells), "",
            "CPU is seconds per 1,000 jobs (/proc utime+stime over the run). "
            "`redis+cluster://` with `--redis-partitions` 1 or 12; each row is a fresh "
            "cluster, gateway, worker-server and worker process. Masters are numbered in port "
            "order; `-` is a master the row's cluster does not have. \"Masters owning "
            "partitions\" counts the distinct masters serving the slots of the deployment's "
            "hash tags; \"partitions per master\" is how many each serves, in master order; "
            "\"scripts per job\" is each master's EVALSHA count (INFO commandstats) over the "
            "run / jobs. The client gives every Submit an idempotency key and a keyed Submit "
            "goes to its tenant's partition, so one tenant's jobs all land in one partition "
            "(only the claims' reads of every partition's queue heads reach the others); "
            f"with {SPREAD_TENANTS} tenants the producer's callers take a tenant each "
            "(x-jobgate-tenant, open mode), which spreads the jobs over the partitions. "
            f"Every process (producer, servers, worker, masters) shares this machine's "
            f"{os.cpu_count()} cores, so throughput cannot scale with the masters; the "
            "masters' CPU split is the figure that shows the partitions spreading the work.",
            ""]  # fmt: skip
