"""Health and reflection on both services (DESIGN: both servers serve them)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.e2e.harness import Deployment, health_status

JOB_SERVICE = "jobgate.v1.JobService"
WORKER_SERVICE = "jobgate.v1.WorkerService"
HEALTH_SERVICE = "grpc.health.v1.Health"
SERVING = health_pb2.HealthCheckResponse.SERVING


def listed_services(target: str) -> set[str]:
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        responses = stub.ServerReflectionInfo(iter([request]), timeout=5)
        return {
            service.name
            for response in responses
            for service in response.list_services_response.service
        }


def test_job_service_port_reports_serving(deployment: Deployment) -> None:
    for target in deployment.job_targets:
        assert health_status(target) == SERVING
        assert health_status(target, JOB_SERVICE) == SERVING


def test_worker_service_port_reports_serving(deployment: Deployment) -> None:
    for target in deployment.worker_targets:
        assert health_status(target) == SERVING
        assert health_status(target, WORKER_SERVICE) == SERVING


def test_reflection_lists_the_job_service(deployment: Deployment) -> None:
    services = listed_services(deployment.job_target)

    assert {JOB_SERVICE, HEALTH_SERVICE} <= services


def test_reflection_lists_the_worker_service(deployment: Deployment) -> None:
    services = listed_services(deployment.worker_target)

    assert {WORKER_SERVICE, HEALTH_SERVICE} <= services


def test_reflection_describes_the_job_service(deployment: Deployment) -> None:
    with grpc.insecure_channel(deployment.job_target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=JOB_SERVICE)
        (response,) = list(stub.ServerReflectionInfo(iter([request]), timeout=5))

    assert response.file_descriptor_response.file_descriptor_proto
