"""The JobService gRPC server: `build_server` (tests bind port 0) apart from running it."""

from __future__ import annotations

import grpc.aio

from gateway_server.job_service import JobService
from gateway_server.scaler import SERVICE_NAME as SCALER_SERVICE_NAME
from gateway_server.scaler import ExternalScaler
from jobgate.keda import externalscaler_pb2_grpc
from jobgate.v1 import job_service_pb2, job_service_pb2_grpc
from serving.grpc_server import new_server
from serving.settings import Address
from serving.shared import Serving

SERVICE_NAME = job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name


def build_server(
    serving: Serving, address: Address, scaler: ExternalScaler | None = None
) -> tuple[grpc.aio.Server, int]:
    """JobService and KEDA's external scaler (+ health, reflection) bound to `address`.

    Returns (server, port). `scaler`: tests pass one with their own watch timings.
    """
    servicer = JobService(serving)
    keda = scaler if scaler is not None else ExternalScaler(serving)

    def add(server: grpc.aio.Server) -> None:
        job_service_pb2_grpc.add_JobServiceServicer_to_server(servicer, server)
        externalscaler_pb2_grpc.add_ExternalScalerServicer_to_server(keda, server)

    return new_server(serving, address, add, [SERVICE_NAME, SCALER_SERVICE_NAME])
