"""TLS and mutual TLS from the client's side (certificates: the session `pki` fixture)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobgate import JobClient, RetryPolicy, UnavailableError
from tests.client.fake_job_service import FakeJobService, start
from tests.pki import Pki


async def tls_server(pki: Pki, *, require_client_cert: bool) -> AsyncIterator[str]:
    credentials = pki.server_credentials(require_client_cert)
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
