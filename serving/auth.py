"""Authentication and tenancy: who is calling, for which tenant, in which role.

With an auth file, `authorization: Bearer <token>` is hashed with SHA-256
and looked up; each comparison runs in constant time. Without one the server
is open: the tenant comes from `x-jobgate-tenant` (else "default"), every
method is allowed, no tenant is restricted to pools, every tenant weighs 1
and a worker serves the pool its request names. The tenant never comes from
a request field.

Roles: `client` calls JobService for its tenant; `admin` calls JobService on
every tenant's jobs (Submit still uses its own tenant) plus the operator
methods (ListWorkers, ListQueues); `worker` calls WorkerService only.

Placement and fair share belong to a tenant, not a token: a client or admin
entry's `pools` and `weight` are its tenant's, and every client and admin
entry of one tenant must say the same (a second token must not reopen what
the first closes), else the file is refused. A worker entry's `pool` is that
token's: the one pool it may claim for. The file is read once, at start.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from google.rpc import code_pb2

from jobgate.v1.limits import POOL_PATTERN

DEFAULT_TENANT = "default"
TENANT_METADATA = "x-jobgate-tenant"
#: The pool of a worker entry without "pool" (and of an open-mode worker naming none).
DEFAULT_POOL = "default"
DEFAULT_WEIGHT = 1
MAX_WEIGHT = 1000
TENANT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class Role(StrEnum):
    CLIENT = "client"
    WORKER = "worker"
    ADMIN = "admin"


#: The roles each service accepts.
JOB_SERVICE_ROLES = frozenset({Role.CLIENT, Role.ADMIN})
WORKER_SERVICE_ROLES = frozenset({Role.WORKER})


@dataclass(frozen=True)
class TenantPolicy:
    """What the auth file says about one tenant's jobs."""

    #: The only pools its jobs may run in, the first the default; None: any pool.
    pools: tuple[str, ...] | None = None
    #: Its share of claims under --fair-share tenant.
    weight: int = DEFAULT_WEIGHT


#: Open mode, and a tenant no entry names: any pool, weight 1.
UNRESTRICTED = TenantPolicy()


@dataclass(frozen=True)
class Caller:
    tenant: str
    role: Role | None  # None in open mode: every method allowed
    #: The tenant's allowed pools (client and admin callers); None: any pool.
    pools: tuple[str, ...] | None = None
    weight: int = DEFAULT_WEIGHT
    #: A worker credential's pool; None in open mode (the request's is taken).
    pool: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def sees_all_tenants(self) -> bool:
        """Get, Cancel, RetryJob and ListJobs reach every tenant's jobs (admin only)."""
        return self.is_admin

    @property
    def tenant_scope(self) -> str | None:
        """The tenant whose jobs the caller may read and change; None: every tenant."""
        return None if self.sees_all_tenants else self.tenant

    @property
    def actor(self) -> str:
        """Who acts, as the audit trail names an admin's Cancel and RetryJob:
        "<role>:<tenant>" ("admin:ops"); empty for the other callers, who act
        on their own tenant's jobs only."""
        return f"{self.role}:{self.tenant}" if self.is_admin else ""

    @property
    def may_operate(self) -> bool:
        """ListWorkers and ListQueues: admins, and anyone in open mode."""
        return self.role is None or self.is_admin


class AuthError(Exception):
    """UNAUTHENTICATED or PERMISSION_DENIED; mapped to a status in one place.

    `reason` (with `metadata`) adds an ErrorInfo, for the refusals DESIGN
    names one for (POOL_NOT_ALLOWED); a plain role mismatch has none.
    """

    def __init__(
        self, code: int, message: str, reason: str = "", metadata: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata: Mapping[str, str] = dict(metadata or {})


def require_operator(caller: Caller, method: str) -> None:
    """PERMISSION_DENIED unless `caller` may call the operator method `method`."""
    if not caller.may_operate:
        raise AuthError(code_pb2.PERMISSION_DENIED, f"{method} needs an admin token")


class AuthFileError(ValueError):
    """The auth file is missing or malformed (a start-up error)."""


@dataclass(frozen=True)
class _Token:
    digest: bytes
    tenant: str
    role: Role
    policy: TenantPolicy = UNRESTRICTED  # client and admin entries
    pool: str = DEFAULT_POOL  # worker entries


class Authenticator:
    """Maps call metadata to a Caller; `open` when built without tokens."""

    def __init__(self, tokens: Sequence[_Token] | None = None) -> None:
        self._tokens = tuple(tokens) if tokens is not None else None
        # load_tokens has checked that a tenant's entries agree; the first decides.
        self._policies: dict[str, TenantPolicy] = {}
        for token in self._tokens or ():
            if token.role is not Role.WORKER:
                self._policies.setdefault(token.tenant, token.policy)

    @property
    def open(self) -> bool:
        return self._tokens is None

    @classmethod
    def from_file(cls, path: str | None) -> Authenticator:
        if path is None:
            return cls(None)
        return cls(load_tokens(path))

    def authenticate(
        self,
        metadata: Iterable[tuple[str, str | bytes]] | None,
        roles: Role | Collection[Role],
    ) -> Caller:
        """The caller for `metadata`, if its role is one of `roles`, else AuthError."""
        allowed = {roles} if isinstance(roles, Role) else set(roles)
        headers = {key.lower(): value for key, value in metadata or ()}
        if self._tokens is None:
            return Caller(_open_tenant(headers.get(TENANT_METADATA)), None)
        token = _bearer_token(headers.get("authorization"))
        caller = self._lookup(token)
        if caller.role not in allowed:
            raise AuthError(
                code_pb2.PERMISSION_DENIED, f"a {caller.role} token may not call this service"
            )
        return caller

    def policy(self, tenant: str) -> TenantPolicy:
        """The tenant's pools and weight; UNRESTRICTED in open mode or when no entry names it."""
        return self._policies.get(tenant, UNRESTRICTED)

    def weights(self) -> dict[str, int]:
        """Every tenant the file names, with its weight (open mode: none, all weigh 1)."""
        return {tenant: policy.weight for tenant, policy in self._policies.items()}

    def named_pools(self) -> tuple[str, ...]:
        """Every pool the file names (tenants' and workers'), sorted."""
        names: set[str] = set()
        for token in self._tokens or ():
            if token.role is Role.WORKER:
                names.add(token.pool)
            else:
                names.update(token.policy.pools or ())
        return tuple(sorted(names))

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
        if found.role is Role.WORKER:
            return Caller(found.tenant, found.role, pool=found.pool)
        policy = found.policy
        return Caller(found.tenant, found.role, pools=policy.pools, weight=policy.weight)


def _open_tenant(value: str | bytes | None) -> str:
    if value is None or value == "":
        return DEFAULT_TENANT
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    if not TENANT_PATTERN.fullmatch(text):
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
    """Parse {"tokens":[{"sha256": hex, "tenant": "...", "role": ..., ...}]} (module doc)."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as error:
        raise AuthFileError(f"cannot read auth file {path}: {error.strerror}") from None
    except ValueError as error:
        raise AuthFileError(f"auth file {path} is not JSON: {error}") from None
    entries = document.get("tokens") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise AuthFileError(f'auth file {path}: expected {{"tokens": [...]}}')
    tokens = [_parse_entry(f"auth file {path}: ", i, entry) for i, entry in enumerate(entries)]
    _check_tenants_agree(f"auth file {path}: ", tokens)
    return tokens


def _parse_entry(file: str, index: int, entry: object) -> _Token:
    where = f"{file}tokens[{index}]"
    if not isinstance(entry, dict):
        raise AuthFileError(f"{where} must be an object")
    digest, tenant, role = entry.get("sha256"), entry.get("tenant"), entry.get("role")
    if not isinstance(digest, str) or not _SHA256_HEX.fullmatch(digest.lower()):
        raise AuthFileError(f"{where}.sha256 must be 64 hex digits")
    if not isinstance(tenant, str) or not TENANT_PATTERN.fullmatch(tenant):
        raise AuthFileError(f"{where}.tenant must match [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}")
    if role not in tuple(Role):
        raise AuthFileError(f"{where}.role must be 'client', 'admin' or 'worker'")
    token = _Token(bytes.fromhex(digest), tenant, Role(role))
    if token.role is Role.WORKER:
        _refuse_keys(where, entry, ("pools", "weight"), "a tenant's, on its client entries")
        return _Token(token.digest, tenant, token.role, pool=_pool(where, entry))
    _refuse_keys(where, entry, ("pool",), "a worker entry's; a tenant lists its 'pools'")
    policy = TenantPolicy(_pools(where, entry), _weight(where, entry))
    return _Token(token.digest, tenant, token.role, policy=policy)


def _refuse_keys(where: str, entry: Mapping[str, object], keys: Sequence[str], whose: str) -> None:
    for key in keys:
        if key in entry:
            raise AuthFileError(f"{where}.{key} is not allowed on a {entry['role']} entry: {whose}")


def _pool(where: str, entry: Mapping[str, object]) -> str:
    pool = entry.get("pool", DEFAULT_POOL)
    if not isinstance(pool, str) or not POOL_PATTERN.fullmatch(pool):
        raise AuthFileError(f"{where}.pool must match {POOL_PATTERN.pattern}")
    return pool


def _pools(where: str, entry: Mapping[str, object]) -> tuple[str, ...] | None:
    if "pools" not in entry:
        return None
    pools = entry["pools"]
    if not isinstance(pools, list):
        raise AuthFileError(f"{where}.pools must be a list of pool names")
    if not pools:
        raise AuthFileError(f"{where}.pools must not be empty (leave it out for any pool)")
    for position, pool in enumerate(pools):
        if not isinstance(pool, str) or not POOL_PATTERN.fullmatch(pool):
            raise AuthFileError(f"{where}.pools[{position}] must match {POOL_PATTERN.pattern}")
        if pool in pools[:position]:
            raise AuthFileError(f"{where}.pools[{position}] repeats {pool!r}")
    return tuple(pools)


def _weight(where: str, entry: Mapping[str, object]) -> int:
    weight = entry.get("weight", DEFAULT_WEIGHT)
    # bool is an int to Python, not to JSON: `"weight": true` is refused.
    if type(weight) is not int or not 1 <= weight <= MAX_WEIGHT:
        raise AuthFileError(f"{where}.weight must be an integer 1..{MAX_WEIGHT}")
    return weight


def _check_tenants_agree(file: str, tokens: Sequence[_Token]) -> None:
    """Every client and admin entry of a tenant states the same pools and weight."""
    first: dict[str, int] = {}
    for index, token in enumerate(tokens):
        if token.role is Role.WORKER:
            continue
        earlier = first.setdefault(token.tenant, index)
        policy = tokens[earlier].policy
        for key in ("pools", "weight"):
            if getattr(policy, key) != getattr(token.policy, key):
                raise AuthFileError(
                    f"{file}tokens[{index}].{key} disagrees with tokens[{earlier}].{key}"
                    f" (tenant {token.tenant!r}): every entry of a tenant must state the same"
                    f" {key} (an entry without it means {_unset(key)})"
                )


def _unset(key: str) -> str:
    return "any pool" if key == "pools" else f"weight {DEFAULT_WEIGHT}"
