"""Authentication and tenancy: who is calling, for which tenant, in which role.

With an auth file, `authorization: Bearer <token>` is hashed with SHA-256
and looked up; each comparison runs in constant time. Without one the server
is open: the tenant comes from `x-jobgate-tenant` (else "default") and every
role is allowed. The tenant never comes from a request field.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from google.rpc import code_pb2

DEFAULT_TENANT = "default"
TENANT_METADATA = "x-jobgate-tenant"
_TENANT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class Role(StrEnum):
    CLIENT = "client"
    WORKER = "worker"


@dataclass(frozen=True)
class Caller:
    tenant: str
    role: Role | None  # None in open mode: every role allowed


class AuthError(Exception):
    """UNAUTHENTICATED or PERMISSION_DENIED; mapped to a status in one place."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class AuthFileError(ValueError):
    """The auth file is missing or malformed (a start-up error)."""


@dataclass(frozen=True)
class _Token:
    digest: bytes
    tenant: str
    role: Role


class Authenticator:
    """Maps call metadata to a Caller; `open` when built without tokens."""

    def __init__(self, tokens: Sequence[_Token] | None = None) -> None:
        self._tokens = tuple(tokens) if tokens is not None else None

    @property
    def open(self) -> bool:
        return self._tokens is None

    @classmethod
    def from_file(cls, path: str | None) -> Authenticator:
        if path is None:
            return cls(None)
        return cls(load_tokens(path))

    def authenticate(
        self, metadata: Iterable[tuple[str, str | bytes]] | None, role: Role
    ) -> Caller:
        """The caller for `metadata`, allowed to act in `role`, else AuthError."""
        headers = {key.lower(): value for key, value in metadata or ()}
        if self._tokens is None:
            return Caller(_open_tenant(headers.get(TENANT_METADATA)), None)
        token = _bearer_token(headers.get("authorization"))
        caller = self._lookup(token)
        if caller.role is not role:
            raise AuthError(
                code_pb2.PERMISSION_DENIED, f"a {caller.role} token may not call this service"
            )
        return caller

    def _lookup(self, token: bytes) -> Caller:
        digest = hashlib.sha256(token).digest()
        found: _Token | None = None
        assert self._tokens is not None
        # Compare against every entry so timing says nothing about which matched.
        for entry in self._tokens:
            if hmac.compare_digest(entry.digest, digest) and found is None:
                found = entry
        if found is None:
            raise AuthError(code_pb2.UNAUTHENTICATED, "unknown bearer token")
        return Caller(found.tenant, found.role)


def _open_tenant(value: str | bytes | None) -> str:
    if value is None or value == "":
        return DEFAULT_TENANT
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    if not _TENANT_PATTERN.fullmatch(text):
        raise AuthError(
            code_pb2.UNAUTHENTICATED,
            f"{TENANT_METADATA} must match [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}",
        )
    return text


def _bearer_token(value: str | bytes | None) -> bytes:
    if value is None:
        raise AuthError(code_pb2.UNAUTHENTICATED, "missing authorization: Bearer <token>")
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    scheme, _, token = text.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError(code_pb2.UNAUTHENTICATED, "authorization must be 'Bearer <token>'")
    return token.strip().encode()


def load_tokens(path: str) -> list[_Token]:
    """Parse {"tokens":[{"sha256": hex, "tenant": "...", "role": "client"|"worker"}]}."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as error:
        raise AuthFileError(f"cannot read auth file {path}: {error.strerror}") from None
    except ValueError as error:
        raise AuthFileError(f"auth file {path} is not JSON: {error}") from None
    entries = document.get("tokens") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise AuthFileError(f'auth file {path}: expected {{"tokens": [...]}}')
    return [_parse_entry(path, index, entry) for index, entry in enumerate(entries)]


def _parse_entry(path: str, index: int, entry: object) -> _Token:
    where = f"auth file {path}: tokens[{index}]"
    if not isinstance(entry, dict):
        raise AuthFileError(f"{where} must be an object")
    digest, tenant, role = entry.get("sha256"), entry.get("tenant"), entry.get("role")
    if not isinstance(digest, str) or not _SHA256_HEX.fullmatch(digest.lower()):
        raise AuthFileError(f"{where}.sha256 must be 64 hex digits")
    if not isinstance(tenant, str) or not _TENANT_PATTERN.fullmatch(tenant):
        raise AuthFileError(f"{where}.tenant must match [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}")
    if role not in (Role.CLIENT.value, Role.WORKER.value):
        raise AuthFileError(f"{where}.role must be 'client' or 'worker'")
    return _Token(bytes.fromhex(digest), tenant, Role(role))
