"""The WorkerService gRPC server: `build_server` (tests bind port 0) apart from running it."""

from __future__ import annotations

import grpc.aio

from jobgate.v1 import worker_service_pb2, worker_service_pb2_grpc
from serving.grpc_server import new_server
from serving.settings import Address
from serving.shared import Serving
from worker_server.registry import WorkerRegistry
from worker_server.worker_service import WorkerService

SERVICE_NAME = worker_service_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name


def build_server(
    serving: Serving, address: Address, registry: WorkerRegistry | None = None
) -> tuple[grpc.aio.Server, int]:
    """WorkerService (+ health, reflection) bound to `address`; returns (server, port).

    `registry`: the worker registry (tests pass one on a fake clock)."""
    servicer = WorkerService(serving, registry)

    def add(server: grpc.aio.Server) -> None:
        worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)

    return new_server(serving, address, add, [SERVICE_NAME])
