"""The JobService gRPC server: `build_server` (tests bind port 0) apart from running it."""

from __future__ import annotations

import grpc.aio

from gateway_server.job_service import JobService
from jobgate.v1 import job_service_pb2, job_service_pb2_grpc
from serving.grpc_server import new_server
from serving.settings import Address
from serving.shared import Serving

SERVICE_NAME = job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name


def build_server(serving: Serving, address: Address) -> tuple[grpc.aio.Server, int]:
    """JobService (+ health, reflection) bound to `address`; returns (server, port)."""
    servicer = JobService(serving)

    def add(server: grpc.aio.Server) -> None:
        job_service_pb2_grpc.add_JobServiceServicer_to_server(servicer, server)

    return new_server(serving, address, add, [SERVICE_NAME])
