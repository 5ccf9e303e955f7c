"""TLS and mutual TLS from the client's side, with certificates made by openssl."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from jobgate import JobClient, RetryPolicy, UnavailableError
from tests.client.fake_job_service import FakeJobService, start

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def openssl(workdir: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=workdir, check=True, capture_output=True)


def issue(workdir: Path, name: str, ext: str) -> None:
    key_options = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(workdir, "req", *key_options, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")  # fmt: skip
    (workdir / f"{name}.ext").write_text(ext)
    openssl(workdir, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem",
            "-CAkey", "ca.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "1",
            "-extfile", f"{name}.ext")  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    workdir = tmp_path_factory.mktemp("pki")
    openssl(workdir, "req", "-x509", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "1", "-subj", "/CN=test-ca")  # fmt: skip
    issue(workdir, "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    issue(workdir, "client", "extendedKeyUsage=clientAuth\n")
    return Pki(
        workdir / "ca.pem",
        workdir / "server.pem",
        workdir / "server.key",
        workdir / "client.pem",
        workdir / "client.key",
    )


async def tls_server(pki: Pki, *, require_client_cert: bool) -> AsyncIterator[str]:
    credentials = grpc.ssl_server_credentials(
        [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())],
        root_certificates=pki.ca.read_bytes(),
        require_client_auth=require_client_cert,
    )
    server, target = await start(FakeJobService(), credentials)
    yield target
    await server.stop(grace=None)


@pytest.fixture
async def tls_target(pki: Pki) -> AsyncIterator[str]:
    async for target in tls_server(pki, require_client_cert=False):
        yield target


@pytest.fixture
async def mtls_target(pki: Pki) -> AsyncIterator[str]:
    async for target in tls_server(pki, require_client_cert=True):
        yield target


NO_RETRY = RetryPolicy(max_attempts=1)


async def test_the_client_verifies_the_server_with_the_given_ca(tls_target: str, pki: Pki) -> None:
    async with JobClient(tls_target, tls_ca=str(pki.ca)) as client:
        assert (await client.get("J")).id == "J"


async def test_a_plaintext_client_cannot_talk_to_a_tls_server(tls_target: str) -> None:
    async with JobClient(tls_target, retry=NO_RETRY, timeout=3) as client:
        with pytest.raises(UnavailableError):
            await client.get("J")


async def test_mutual_tls_presents_the_client_certificate(mtls_target: str, pki: Pki) -> None:
    async with JobClient(
        mtls_target,
        tls_ca=str(pki.ca),
        tls_cert=str(pki.client_cert),
        tls_key=str(pki.client_key),
    ) as client:
        assert (await client.get("J")).id == "J"


async def test_mutual_tls_without_a_client_certificate_is_refused(
    mtls_target: str, pki: Pki
) -> None:
    async with JobClient(mtls_target, tls_ca=str(pki.ca), retry=NO_RETRY, timeout=3) as client:
        with pytest.raises(UnavailableError):
            await client.get("J")


def test_a_certificate_without_its_key_is_a_usage_error(pki: Pki) -> None:
    with pytest.raises(ValueError, match="go together"):
        JobClient("127.0.0.1:1", tls_cert=str(pki.client_cert))
