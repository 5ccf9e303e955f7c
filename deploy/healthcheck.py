"""Container HEALTHCHECK: ask the server's gRPC health service whether it serves.

Runs inside the jobgate image (no grpc_health_probe binary is needed: the
image already has grpcio and grpcio-health-checking). It checks the address
the server listens on, JOBGATE_LISTEN (0.0.0.0 / :: are reached on loopback),
or the HOST:PORT given as the first argument. Exit 0 when SERVING, 1
otherwise (NOT_SERVING while draining or while Redis is unreachable, or no
answer within the timeout).

Plaintext only: with --tls-cert the probe would need the server's CA (and,
with --tls-client-ca, a client certificate); use a TCP check there instead.
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

TIMEOUT_SECONDS = 3.0


def probe_target(listen: str) -> str:
    host, _, port = listen.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


def main(argv: list[str]) -> int:
    listen = argv[1] if len(argv) > 1 else os.environ.get("JOBGATE_LISTEN", "127.0.0.1:50051")
    target = probe_target(listen)
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_SECONDS)
        except grpc.RpcError as error:
            print(f"unhealthy: {target}: {error.code().name}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        print(f"unhealthy: {target}: {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
