"""errors.to_status: the one mapping from exceptions to google.rpc.Status."""

from __future__ import annotations

import logging

import pytest
from google.rpc import code_pb2, error_details_pb2

import jobgate
from jobgate.v1.errors import ERROR_DOMAIN, Reason
from serving.auth import AuthError
from serving.errors import MAX_MESSAGE_BYTES, ShuttingDown, to_status
from serving.violations import FieldViolation, ValidationError
from store.errors import InvalidRequest, JobNotFound, StoreError


def _reasons(status: object) -> list[str]:
    reasons = []
    for detail in getattr(status, "details", []):
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reasons.append(info.reason)
    return reasons


def test_store_error_without_a_public_code_becomes_internal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR):
        status = to_status(StoreError("something odd"))
    assert status.code == code_pb2.INTERNAL
    assert [r.exc_info is not None for r in caplog.records] == [True]


def test_store_invalid_request_keeps_its_field() -> None:
    status = to_status(InvalidRequest("group.children", "too many"))
    bad = error_details_pb2.BadRequest()
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert any(detail.Unpack(bad) for detail in status.details)
    assert [v.field for v in bad.field_violations] == ["group.children"]


def test_validation_error_lists_every_violation() -> None:
    error = ValidationError([FieldViolation("a", "x"), FieldViolation("b", "y")])
    status = to_status(error)
    bad = error_details_pb2.BadRequest()
    assert any(detail.Unpack(bad) for detail in status.details)
    assert [v.field for v in bad.field_violations] == ["a", "b"]


def test_auth_errors_keep_their_code() -> None:
    assert to_status(AuthError(code_pb2.PERMISSION_DENIED, "no")).code == code_pb2.PERMISSION_DENIED


def test_an_auth_error_with_a_reason_carries_error_info() -> None:
    error = AuthError(code_pb2.PERMISSION_DENIED, "no", "POOL_NOT_ALLOWED", {"pool": "gpu-a"})
    status = to_status(error)
    [detail] = status.details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    assert (status.code, info.reason, info.domain) == (
        code_pb2.PERMISSION_DENIED,
        "POOL_NOT_ALLOWED",
        ERROR_DOMAIN,
    )
    assert dict(info.metadata) == {"pool": "gpu-a"}


def test_a_role_mismatch_carries_no_error_info() -> None:
    assert not to_status(AuthError(code_pb2.PERMISSION_DENIED, "no")).details


def test_error_info_metadata_quotes_at_most_128_bytes() -> None:
    error = AuthError(code_pb2.PERMISSION_DENIED, "no", "POOL_NOT_ALLOWED", {"pool": "p" * 5000})
    info = error_details_pb2.ErrorInfo()
    assert to_status(error).details[0].Unpack(info)
    assert len(info.metadata["pool"]) == 128


def test_shutting_down_is_unavailable_with_reason() -> None:
    status = to_status(ShuttingDown())
    assert (status.code, _reasons(status)) == (code_pb2.UNAVAILABLE, [Reason.SHUTTING_DOWN])


def test_a_bug_is_internal_never_unavailable() -> None:
    assert to_status(KeyError("boom")).code == code_pb2.INTERNAL


def _store_error_classes() -> list[type[StoreError]]:
    found: list[type[StoreError]] = []
    pending = [StoreError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_every_reason_but_shutting_down_has_a_store_error() -> None:
    reasons = {cls.reason for cls in _store_error_classes() if cls.reason}
    assert reasons <= set(Reason)
    # The servers send the rest themselves: draining, and placement refusals
    # (serving/placement.py) decided before the store is called.
    assert reasons | {Reason.SHUTTING_DOWN, Reason.POOL_NOT_ALLOWED} == set(Reason)


def test_server_and_client_share_one_field_violation_class() -> None:
    assert FieldViolation is jobgate.FieldViolation


def test_a_store_message_is_cut_to_the_bound() -> None:
    status = to_status(JobNotFound("no job " + "é" * 10_000))
    assert len(status.message.encode()) <= MAX_MESSAGE_BYTES


def test_bad_request_lists_only_the_violations_that_fit() -> None:
    violations = [FieldViolation(f"f{i}" + "x" * 300, "d" * 300) for i in range(500)]
    status = to_status(ValidationError(violations))
    bad = error_details_pb2.BadRequest()
    assert any(detail.Unpack(bad) for detail in status.details)
    assert 1 <= len(bad.field_violations) < 20
    assert status.ByteSize() < 4096
    assert "more violations" in status.message
