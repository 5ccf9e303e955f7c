"""ListJobs page tokens: opaque, url-safe, bound to their filter and the caller's scope.

A token is the keyset cursor of a walk (the create_time and id of the last
job listed, newest first) plus a binding: 16 bytes of SHA-256 over the
caller's scope (its tenant, or every tenant for an admin) and the filter's
canonical text (`format_filter`, so `status=failed` and `status = FAILED`
share tokens). Bytes: version (1) | create_time in microseconds since the
epoch (signed, 8) | job id (26 ASCII) | binding (16), then base64url without
padding: 68 characters.

Tokens are not signed, so replicas need no shared key. A forged token can
only move a walk's starting point: the store applies the scope and the
filter on every page itself, so no token shows a caller a job it could not
list from the first page. The binding is there to catch a mistake (a token
passed back with another filter or by another caller), not an attacker:
such a token is INVALID_ARGUMENT naming `page_token`, as is one that does
not decode.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
from datetime import UTC, datetime, timedelta

from gateway_server.list_filter import format_filter
from jobgate.v1.limits import JOB_ID_PATTERN
from serving.violations import FieldViolation, ValidationError
from store.model import JobFilter, ListCursor

FIELD = "page_token"
VERSION = 1
_LAYOUT = struct.Struct(">Bq26s16s")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_URL_SAFE = re.compile(r"[A-Za-z0-9_-]+")
_UNDECODABLE = "does not decode (pass back a next_page_token unchanged)"
#: "*" is no tenant's name (tenants start with a letter or digit).
_EVERY_TENANT = "*"


def encode_page_token(cursor: ListCursor, tenant_scope: str | None, job_filter: JobFilter) -> str:
    """The token that resumes a walk after `cursor` (tenant_scope None: every tenant)."""
    if not JOB_ID_PATTERN.fullmatch(cursor.job_id):
        raise ValueError(f"a cursor holds a job id, not {cursor.job_id!r}")
    created = cursor.create_time
    created = created if created.tzinfo else created.replace(tzinfo=UTC)
    micros = (created - _EPOCH) // timedelta(microseconds=1)
    packed = _LAYOUT.pack(
        VERSION, micros, cursor.job_id.encode("ascii"), _binding(tenant_scope, job_filter)
    )
    return base64.urlsafe_b64encode(packed).rstrip(b"=").decode("ascii")


def decode_page_token(
    token: str, tenant_scope: str | None, job_filter: JobFilter
) -> ListCursor | None:
    """The cursor `token` resumes after (None for ""), else ValidationError naming page_token."""
    if not token:
        return None
    version, micros, job_id, binding = _unpack(token)
    if version != VERSION:
        raise _refused(_UNDECODABLE)
    if not hmac.compare_digest(binding, _binding(tenant_scope, job_filter)):
        raise _refused("was made for another filter or caller (list again from the first page)")
    try:
        create_time = _EPOCH + timedelta(microseconds=micros)
        text = job_id.decode("ascii")
    except (OverflowError, UnicodeDecodeError):
        raise _refused(_UNDECODABLE) from None
    if not JOB_ID_PATTERN.fullmatch(text):
        raise _refused(_UNDECODABLE)
    return ListCursor(create_time=create_time, job_id=text)


def _unpack(token: str) -> tuple[int, int, bytes, bytes]:
    if not _URL_SAFE.fullmatch(token):
        raise _refused(_UNDECODABLE)
    try:
        packed = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise _refused(_UNDECODABLE) from None
    if len(packed) != _LAYOUT.size:
        raise _refused(_UNDECODABLE)
    version, micros, job_id, binding = _LAYOUT.unpack(packed)
    return version, micros, job_id, binding


def _binding(tenant_scope: str | None, job_filter: JobFilter) -> bytes:
    scope = _EVERY_TENANT if tenant_scope is None else tenant_scope
    text = f"{scope}\0{format_filter(job_filter)}"
    return hashlib.sha256(text.encode()).digest()[:16]


def _refused(what: str) -> ValidationError:
    return ValidationError([FieldViolation(FIELD, f"this token {what}")])
