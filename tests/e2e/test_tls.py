"""Mutual TLS with --tls-cert, --tls-key and --tls-client-ca (team decision on server flags)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.e2e.api import Api, failure_of, fresh_name, tenant_metadata
from tests.e2e.harness import FAST_SETTINGS, Deployment, embedded_deployment, start_with_retry


@dataclass(frozen=True)
class Pki:
    ca: bytes
    server_cert: Path
    server_key: Path
    client_cert: bytes
    client_key: bytes
    ca_path: Path

    def client_credentials(self, with_cert: bool = True) -> grpc.ChannelCredentials:
        if with_cert:
            return grpc.ssl_channel_credentials(self.ca, self.client_key, self.client_cert)
        return grpc.ssl_channel_credentials(self.ca)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> Pki:
    """A throwaway CA, a server cert for 127.0.0.1, and a client cert."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")
    days = ("-days", "2")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-subj", "/CN=jobgate-test-ca", *days, cwd=directory)  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN={name}", cwd=directory)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-extfile", "san.ext", *days,
                cwd=directory)  # fmt: skip
    return Pki(
        ca=(directory / "ca.pem").read_bytes(),
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=(directory / "client.pem").read_bytes(),
        client_key=(directory / "client.key").read_bytes(),
        ca_path=directory / "ca.pem",
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    settings = {
        **FAST_SETTINGS,
        "tls-cert": str(pki.server_cert),
        "tls-key": str(pki.server_key),
        "tls-client-ca": str(pki.ca_path),
    }
    workdir = tmp_path_factory.mktemp("mtls")

    def build() -> Deployment:
        deployment = embedded_deployment(workdir, settings)
        for process in deployment.processes:
            process.credentials = pki.client_credentials()
        return deployment

    deployment = start_with_retry(build)
    yield deployment
    deployment.stop()


@pytest.fixture
async def opened_channels(mtls: Deployment) -> AsyncIterator[list[grpc.aio.Channel]]:
    opened: list[grpc.aio.Channel] = []
    yield opened
    for channel in opened:
        await channel.close(None)


def api_over(
    opened: list[grpc.aio.Channel],
    deployment: Deployment,
    credentials: grpc.ChannelCredentials | None,
) -> Api:
    def channel(target: str) -> grpc.aio.Channel:
        made = (
            grpc.aio.insecure_channel(target)
            if credentials is None
            else grpc.aio.secure_channel(target, credentials)
        )
        opened.append(made)
        return made

    return Api(
        channel(deployment.job_target),
        channel(deployment.worker_target),
        tenant_metadata(fresh_name("t")),
    )


async def test_client_with_a_certificate_is_served(
    mtls: Deployment, pki: Pki, opened_channels: list[grpc.aio.Channel]
) -> None:
    api = api_over(opened_channels, mtls, pki.client_credentials())
    model = fresh_name("m")

    job = await api.submit(model)

    assert (await api.claim_one(model)).job.id == job.id


async def test_client_without_a_certificate_is_refused(
    mtls: Deployment, pki: Pki, opened_channels: list[grpc.aio.Channel]
) -> None:
    api = api_over(opened_channels, mtls, pki.client_credentials(with_cert=False))

    failure = await failure_of(api.submit(fresh_name("m")))

    assert failure.code == grpc.StatusCode.UNAVAILABLE, failure


async def test_plaintext_client_is_refused(
    mtls: Deployment, opened_channels: list[grpc.aio.Channel]
) -> None:
    api = api_over(opened_channels, mtls, None)

    failure = await failure_of(api.claim([fresh_name("m")]))

    assert failure.code == grpc.StatusCode.UNAVAILABLE, failure
