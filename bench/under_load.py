"""Gateway and worker-server under many open streams and long-polls.

RSS and thread counts from /proc, and the dispatch latency (Submit call start
-> handler start) of further jobs, idle and then with bench.load holding
its streams and polls open against the same servers: a gateway and a
worker-server, or one `jobgate serve`.
"""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from bench.e2e import offered_latency, ready_worker
from bench.procstat import rss_and_threads
from bench.servers import Topology
from bench.sink import Sink

PROBE_MODEL = "bench-probe"
IDLE = "idle"  # the label of the state before the load


@dataclass(frozen=True)
class LoadState:
    topology: str
    label: str
    memory: dict[str, tuple[int, int]]  # process -> (RSS bytes, threads)
    dispatch: list[float]  # seconds, submit call start -> handler start
    retried_opens: int = 0  # stream opens that came back CANCELLED and were retried


@contextmanager
def load_process(topology: Topology, streams: int, pollers: int) -> Iterator[int]:
    """The load held open; yields how many stream opens had to be retried."""
    command = [sys.executable, "-m", "bench.load", "--job-target", topology.job_target,
               "--worker-target", topology.worker_target, "--streams", str(streams),
               "--pollers", str(pollers)]  # fmt: skip
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    try:
        readable, _, _ = select.select([process.stdout], [], [], 300)
        line = process.stdout.readline() if readable else ""
        word, _, retried = line.partition(" ")
        if word != "ready":
            raise RuntimeError(f"bench.load did not get ready (said {line!r})")
        yield int(retried)
    finally:
        process.stdin.close()  # the load process ends when its stdin closes
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _state(label: str, topology: Topology, sink: Sink, rate: float, seconds: float) -> LoadState:
    watched = {name: pid for name, pid in topology.pids.items() if name != "redis"}
    memory = {name: rss_and_threads(pid) for name, pid in watched.items()}
    dispatch, _ = offered_latency(topology, sink, PROBE_MODEL, rate, seconds)
    return LoadState(topology.name, label, memory, dispatch)


def under_load(
    topology: Topology, sink: Sink, streams: int, pollers: int, rate: float, seconds: float
) -> list[LoadState]:
    """The idle state, then the loaded one."""
    with ready_worker(topology, sink, PROBE_MODEL, 1):
        states = [_state(IDLE, topology, sink, rate, seconds)]
        with load_process(topology, streams, pollers) as retried:
            label = f"{streams} streams + {pollers} long-polls"
            loaded = _state(label, topology, sink, rate, seconds)
            states.append(replace(loaded, retried_opens=retried))
    return states
