"""Mutual TLS with --tls-cert, --tls-key and --tls-client-ca (team decision on server flags)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from tests.e2e.api import Api, failure_of, fresh_name, tenant_metadata
from tests.e2e.harness import FAST_SETTINGS, Deployment, embedded_deployment
from tests.pki import Pki


@pytest.fixture(scope="module")
def mtls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    settings = {
        **FAST_SETTINGS,
        "tls-cert": str(pki.server_cert),
        "tls-key": str(pki.server_key),
        "tls-client-ca": str(pki.ca),
    }
    deployment = embedded_deployment(tmp_path_factory.mktemp("mtls"), settings)
    for process in deployment.processes:
        process.credentials = pki.client_credentials()
    deployment.start()
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
