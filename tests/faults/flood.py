"""A flooding client, run as its own process so its CPU is not the measured client's.

`python -m tests.faults.flood TARGET TENANT MODEL SECONDS LOOPS RATE` submits
unkeyed jobs from LOOPS threads for SECONDS, RATE per second in all,
ignoring RetryInfo (a misbehaving tenant), and prints {"accepted": n, "refused": m, "other": k,
"ids": [...], "windows": [[start, end], ...]} as JSON (the ids so the test
can account for every job). It floods in bursts of one second on, one second
off, and reports the on-windows (wall clock), so the measured client's calls
inside and outside them share the same background load.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import grpc

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc


def flood(
    target: str, tenant: str, model: str, seconds: float, loops: int, rate: float
) -> dict[str, Any]:
    counts = {"accepted": 0, "refused": 0, "other": 0}
    ids: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    windows: list[list[float]] = []
    wall = time.time() - started
    for on in range(0, int(seconds), 2):
        windows.append([wall + started + on, wall + started + on + 1])
    request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model=model, payload=b"{}"))

    def loop() -> None:
        with grpc.insecure_channel(target) as channel:
            stub = job_service_pb2_grpc.JobServiceStub(channel)
            due = time.monotonic()
            while time.monotonic() < deadline:
                due += loops / rate
                time.sleep(max(0.0, due - time.monotonic()))
                if int(time.monotonic() - started) % 2:  # an off second
                    continue
                try:
                    response = stub.Submit(
                        request, metadata=(("x-jobgate-tenant", tenant),), timeout=5
                    )
                    outcome = "accepted"
                    ids.append(response.job.id)
                except grpc.RpcError as error:
                    refused = error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    outcome = "refused" if refused else "other"
                with lock:
                    counts[outcome] += 1

    threads = [threading.Thread(target=loop) for _ in range(loops)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {**counts, "ids": ids, "windows": windows}


if __name__ == "__main__":
    target, tenant, model, seconds, loops, rate = sys.argv[1:7]
    print(json.dumps(flood(target, tenant, model, float(seconds), int(loops), float(rate))))
