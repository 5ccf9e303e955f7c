"""errors.to_status: the one mapping from exceptions to google.rpc.Status."""

from __future__ import annotations

from google.rpc import code_pb2, error_details_pb2

from serving.auth import AuthError
from serving.errors import ShuttingDown, to_status
from serving.validation import FieldViolation, ValidationError
from store.errors import InvalidRequest, StoreError


def _reasons(status: object) -> list[str]:
    reasons = []
    for detail in getattr(status, "details", []):
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reasons.append(info.reason)
    return reasons


def test_store_error_without_a_public_code_becomes_unavailable() -> None:
    status = to_status(StoreError("something odd"))
    assert status.code == code_pb2.UNAVAILABLE


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


def test_shutting_down_is_unavailable_with_reason() -> None:
    status = to_status(ShuttingDown())
    assert (status.code, _reasons(status)) == (code_pb2.UNAVAILABLE, ["SHUTTING_DOWN"])


def test_a_bug_is_unavailable_never_internal() -> None:
    assert to_status(KeyError("boom")).code == code_pb2.UNAVAILABLE
