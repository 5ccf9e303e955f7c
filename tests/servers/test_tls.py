"""TLS with --tls-cert/--tls-key, and mutual TLS with --tls-client-ca."""

from __future__ import annotations

import grpc
import pytest

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from serving.settings import ServerSettings
from tests.pki import Pki
from tests.servers.conftest import MakeHarness


def _settings(pki: Pki, mutual: bool) -> ServerSettings:
    return ServerSettings(
        tls_cert=str(pki.server_cert),
        tls_key=str(pki.server_key),
        tls_client_ca=str(pki.ca) if mutual else None,
    )


async def _submit(port: int, credentials: grpc.ChannelCredentials) -> job_pb2.Job:
    async with grpc.aio.secure_channel(f"localhost:{port}", credentials) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m"))
        return (await stub.Submit(request, timeout=5)).job


async def test_tls_server_accepts_a_client_trusting_its_ca(
    make_harness: MakeHarness, pki: Pki
) -> None:
    harness = await make_harness(settings=_settings(pki, mutual=False))
    assert (await _submit(harness.job_port, pki.client_credentials(with_cert=False))).id


async def test_mutual_tls_refuses_a_client_without_a_certificate(
    make_harness: MakeHarness, pki: Pki
) -> None:
    harness = await make_harness(settings=_settings(pki, mutual=True))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _submit(harness.job_port, pki.client_credentials(with_cert=False))
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert (await _submit(harness.job_port, pki.client_credentials())).id
