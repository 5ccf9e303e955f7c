"""TLS with --tls-cert/--tls-key, and mutual TLS with --tls-client-ca."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from jobgate.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from serving.settings import ServerSettings
from tests.servers.conftest import MakeHarness

EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _issue(name: str, directory: Path) -> None:
    _openssl("req", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=directory)  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", f"{name}.pem",
             cwd=directory)  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")
    directory = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", *EC_KEY, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
             "-subj", "/CN=jobgate-test-ca", cwd=directory)  # fmt: skip
    _issue("server", directory)
    _issue("client", directory)
    return directory


def _settings(pki: Path, mutual: bool) -> ServerSettings:
    return ServerSettings(
        tls_cert=str(pki / "server.pem"),
        tls_key=str(pki / "server.key"),
        tls_client_ca=str(pki / "ca.pem") if mutual else None,
    )


async def _submit(port: int, credentials: grpc.ChannelCredentials) -> job_pb2.Job:
    async with grpc.aio.secure_channel(f"localhost:{port}", credentials) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        request = job_service_pb2.SubmitRequest(job=job_pb2.JobSpec(model="m"))
        return (await stub.Submit(request, timeout=5)).job


async def test_tls_server_accepts_a_client_trusting_its_ca(
    make_harness: MakeHarness, pki: Path
) -> None:
    harness = await make_harness(settings=_settings(pki, mutual=False))
    credentials = grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes())
    assert (await _submit(harness.job_port, credentials)).id


async def test_mutual_tls_refuses_a_client_without_a_certificate(
    make_harness: MakeHarness, pki: Path
) -> None:
    harness = await make_harness(settings=_settings(pki, mutual=True))
    ca = (pki / "ca.pem").read_bytes()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _submit(harness.job_port, grpc.ssl_channel_credentials(ca))
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    with_cert = grpc.ssl_channel_credentials(
        ca, (pki / "client.key").read_bytes(), (pki / "client.pem").read_bytes()
    )
    assert (await _submit(harness.job_port, with_cert)).id
