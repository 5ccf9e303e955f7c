"""Auth file tokens, roles, open mode and tenant isolation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import grpc
import pytest

from jobgate.v1 import job_service_pb2
from serving.auth import Authenticator, AuthFileError, Role
from tests.servers.conftest import MakeHarness
from tests.servers.harness import Harness, Metadata, fails

TOKENS = {"alice-token": ("alice", "client"), "bob-token": ("bob", "client")}
TOKENS["gpu-token"] = ("fleet", "worker")
TOKENS["ops-token"] = ("ops", "admin")


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


def write_auth_file(path: Path) -> str:
    entries = [
        {"sha256": hashlib.sha256(token.encode()).hexdigest(), "tenant": tenant, "role": role}
        for token, (tenant, role) in TOKENS.items()
    ]
    path.write_text(json.dumps({"tokens": entries}))
    return str(path)


@pytest.fixture
async def secured(make_harness: MakeHarness, tmp_path: Path) -> Harness:
    auth = Authenticator.from_file(write_auth_file(tmp_path / "auth.json"))
    return await make_harness(auth=auth)


async def test_missing_token_is_unauthenticated(secured: Harness) -> None:
    failure = await fails(secured.submit())
    assert failure.code is grpc.StatusCode.UNAUTHENTICATED


async def test_unknown_token_is_unauthenticated(secured: Harness) -> None:
    failure = await fails(secured.submit(metadata=bearer("guess")))
    assert failure.code is grpc.StatusCode.UNAUTHENTICATED


async def test_client_token_submits_as_its_tenant(secured: Harness) -> None:
    job = await secured.submit(metadata=(*bearer("alice-token"), ("x-jobgate-tenant", "bob")))
    assert job.tenant == "alice"


async def test_worker_token_may_not_call_job_service(secured: Harness) -> None:
    failure = await fails(secured.submit(metadata=bearer("gpu-token")))
    assert failure.code is grpc.StatusCode.PERMISSION_DENIED


async def test_client_token_may_not_call_worker_service(secured: Harness) -> None:
    from jobgate.v1 import worker_service_pb2

    request = worker_service_pb2.ClaimNextRequest(worker_id="w", models=["m"])
    call = secured.worker.ClaimNext(request, metadata=bearer("alice-token"), timeout=5)
    assert (await fails(call)).code is grpc.StatusCode.PERMISSION_DENIED


async def test_worker_token_claims_any_tenants_job(secured: Harness) -> None:
    from jobgate.v1 import worker_service_pb2

    job = await secured.submit(metadata=bearer("alice-token"))
    request = worker_service_pb2.ClaimNextRequest(worker_id="w", models=["m"])
    response = await secured.worker.ClaimNext(request, metadata=bearer("gpu-token"), timeout=5)
    assert [claimed.job.id for claimed in response.jobs] == [job.id]


async def test_another_tenants_job_is_not_found(secured: Harness) -> None:
    job = await secured.submit(metadata=bearer("alice-token"))
    bob = bearer("bob-token")
    get = secured.job.Get(job_service_pb2.GetRequest(job_id=job.id), metadata=bob)
    cancel = secured.job.Cancel(job_service_pb2.CancelRequest(job_id=job.id), metadata=bob)
    stream = secured.job.StreamStatus(
        job_service_pb2.StreamStatusRequest(job_id=job.id), metadata=bob
    )
    for call in (get, cancel, stream.read()):
        failure = await fails(call)
        assert (failure.code, failure.reasons) == (grpc.StatusCode.NOT_FOUND, ["JOB_NOT_FOUND"])


async def test_open_mode_takes_tenant_from_metadata(harness: Harness) -> None:
    job = await harness.submit(metadata=(("x-jobgate-tenant", "team-a"),))
    assert job.tenant == "team-a"
    assert (await harness.submit()).tenant == "default"
    failure = await fails(
        harness.job.Get(
            job_service_pb2.GetRequest(job_id=job.id), metadata=(("x-jobgate-tenant", "b"),)
        )
    )
    assert failure.code is grpc.StatusCode.NOT_FOUND


def test_auth_file_must_be_valid(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    for document in (
        '{"tokens": [{"sha256": "xyz", "tenant": "a", "role": "client"}]}',
        '{"tokens": [{"sha256": "' + "0" * 64 + '", "tenant": "a", "role": "operator"}]}',
        "not json",
        '{"nope": []}',
    ):
        path.write_text(document)
        with pytest.raises(AuthFileError):
            Authenticator.from_file(str(path))
    with pytest.raises(AuthFileError):
        Authenticator.from_file(str(tmp_path / "missing.json"))


def test_bearer_scheme_is_required(tmp_path: Path) -> None:
    auth = Authenticator.from_file(write_auth_file(tmp_path / "auth.json"))
    caller = auth.authenticate([("authorization", "Bearer alice-token")], Role.CLIENT)
    assert caller.tenant == "alice"
    from serving.auth import AuthError

    with pytest.raises(AuthError):
        auth.authenticate([("authorization", "Basic alice-token")], Role.CLIENT)


async def test_admin_token_submits_as_its_own_tenant(secured: Harness) -> None:
    assert (await secured.submit(metadata=bearer("ops-token"))).tenant == "ops"


async def test_admin_token_may_not_call_worker_service(secured: Harness) -> None:
    from jobgate.v1 import worker_service_pb2

    request = worker_service_pb2.ClaimNextRequest(worker_id="w", models=["m"])
    call = secured.worker.ClaimNext(request, metadata=bearer("ops-token"), timeout=5)
    assert (await fails(call)).code is grpc.StatusCode.PERMISSION_DENIED


def operator_calls(harness: Harness, metadata: Metadata) -> list[object]:
    return [
        harness.job.ListWorkers(job_service_pb2.ListWorkersRequest(), metadata=metadata),
        harness.job.ListQueues(job_service_pb2.ListQueuesRequest(), metadata=metadata),
    ]


@pytest.mark.parametrize("token", ["alice-token", "gpu-token"])
async def test_operator_methods_are_permission_denied_to_clients_and_workers(
    secured: Harness, token: str
) -> None:
    for call in operator_calls(secured, bearer(token)):
        assert (await fails(call)).code is grpc.StatusCode.PERMISSION_DENIED


async def test_admin_token_may_call_the_operator_methods(secured: Harness) -> None:
    for call in operator_calls(secured, bearer("ops-token")):
        await call  # type: ignore[misc]


async def test_open_mode_allows_the_operator_methods(harness: Harness) -> None:
    for call in operator_calls(harness, ()):
        await call  # type: ignore[misc]
