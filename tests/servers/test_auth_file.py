"""The auth file's placement and fair-share keys, and the roles (DESIGN: Tenancy, Placement).

Every refusal is an AuthFileError at start that names the file and the
entry's key (`tokens[i].pools`), so the operator knows what to fix.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from serving.auth import (
    DEFAULT_POOL,
    JOB_SERVICE_ROLES,
    UNRESTRICTED,
    WORKER_SERVICE_ROLES,
    Authenticator,
    AuthError,
    AuthFileError,
    Caller,
    Role,
    TenantPolicy,
    require_operator,
)

SHA = "0" * 64


def entry(role: str = "client", tenant: str = "acme", token: str = "", **keys: Any) -> Any:
    digest = hashlib.sha256(token.encode()).hexdigest() if token else SHA
    return {"sha256": digest, "tenant": tenant, "role": role, **keys}


def load(tmp_path: Path, *entries: Any) -> Authenticator:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"tokens": list(entries)}))
    return Authenticator.from_file(str(path))


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


REFUSED: list[tuple[str, list[Any], str]] = [
    ("pools not a list", [entry(pools="onprem")], "tokens[0].pools"),
    ("empty pools", [entry(pools=[])], "tokens[0].pools"),
    ("upper-case pool in pools", [entry(pools=["OnPrem"])], "tokens[0].pools[0]"),
    ("pool name too long", [entry(pools=["p" * 65])], "tokens[0].pools[0]"),
    ("pool not a string", [entry(pools=[7])], "tokens[0].pools[0]"),
    ("a pool listed twice", [entry(pools=["a", "b", "a"])], "tokens[0].pools[2]"),
    ("weight zero", [entry(weight=0)], "tokens[0].weight"),
    ("weight over 1000", [entry(weight=1001)], "tokens[0].weight"),
    ("weight a string", [entry(weight="5")], "tokens[0].weight"),
    ("weight a bool", [entry(weight=True)], "tokens[0].weight"),
    ("weight a float", [entry(weight=2.0)], "tokens[0].weight"),
    ("pool on a client entry", [entry(pool="gpu-a")], "tokens[0].pool"),
    ("pool on an admin entry", [entry("admin", pool="gpu-a")], "tokens[0].pool"),
    ("pools on a worker entry", [entry("worker", pools=["gpu-a"])], "tokens[0].pools"),
    ("weight on a worker entry", [entry("worker", weight=2)], "tokens[0].weight"),
    ("malformed worker pool", [entry("worker", pool="GPU A")], "tokens[0].pool"),
    ("worker pool not a string", [entry("worker", pool=["a"])], "tokens[0].pool"),
    ("empty worker pool", [entry("worker", pool="")], "tokens[0].pool"),
]


@pytest.mark.parametrize(
    ("entries", "named"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_a_bad_placement_key_is_refused_naming_the_entry_and_the_file(
    tmp_path: Path, entries: list[Any], named: str
) -> None:
    with pytest.raises(AuthFileError) as refused:
        load(tmp_path, *entries)
    assert named in str(refused.value)
    assert str(tmp_path / "auth.json") in str(refused.value)


DISAGREE: list[tuple[str, list[Any], str]] = [
    ("different pools", [entry(pools=["a"]), entry(pools=["b"])], "pools"),
    ("one restricted, one not", [entry(pools=["a"]), entry()], "pools"),
    ("one free, then one restricted", [entry(), entry(pools=["a"])], "pools"),
    ("same pools, another default", [entry(pools=["a", "b"]), entry(pools=["b", "a"])], "pools"),
    ("different weights", [entry(weight=5), entry(weight=2)], "weight"),
    ("a weight and none", [entry(weight=5), entry()], "weight"),
    ("an admin and a client entry", [entry(pools=["a"]), entry("admin", pools=["b"])], "pools"),
]


@pytest.mark.parametrize(
    ("entries", "key"), [c[1:] for c in DISAGREE], ids=[c[0] for c in DISAGREE]
)
def test_two_entries_of_a_tenant_that_disagree_are_refused_naming_both(
    tmp_path: Path, entries: list[Any], key: str
) -> None:
    other = entry("client", tenant="other", pools=["z"])
    with pytest.raises(AuthFileError) as refused:
        load(tmp_path, entries[0], other, entries[1])
    assert f"tokens[2].{key}" in str(refused.value)
    assert f"tokens[0].{key}" in str(refused.value)


def test_entries_of_different_tenants_may_differ(tmp_path: Path) -> None:
    auth = load(tmp_path, entry(tenant="a", pools=["x"], weight=3), entry(tenant="b"))
    assert auth.policy("a") == TenantPolicy(("x",), 3)
    assert auth.policy("b") == UNRESTRICTED


def test_an_explicit_weight_of_one_agrees_with_none(tmp_path: Path) -> None:
    auth = load(tmp_path, entry(weight=1), entry())
    assert auth.policy("acme").weight == 1


def test_a_worker_entry_does_not_speak_for_its_tenants_jobs(tmp_path: Path) -> None:
    auth = load(tmp_path, entry(pools=["onprem"], weight=4), entry("worker", pool="gpu-a"))
    assert auth.policy("acme") == TenantPolicy(("onprem",), 4)


@pytest.mark.parametrize("weight", [1, 1000])
def test_weights_at_both_ends_of_the_range_are_accepted(tmp_path: Path, weight: int) -> None:
    assert load(tmp_path, entry(weight=weight)).policy("acme").weight == weight


def test_a_client_caller_carries_its_tenants_pools_and_weight(tmp_path: Path) -> None:
    auth = load(tmp_path, entry(token="t", pools=["onprem", "edge"], weight=7))
    caller = auth.authenticate(bearer("t"), JOB_SERVICE_ROLES)
    assert (caller.pools, caller.weight, caller.pool) == (("onprem", "edge"), 7, None)


def test_a_tenant_without_pools_is_unrestricted_with_weight_one(tmp_path: Path) -> None:
    caller = load(tmp_path, entry(token="t")).authenticate(bearer("t"), JOB_SERVICE_ROLES)
    assert (caller.pools, caller.weight) == (None, 1)


def test_a_worker_entry_without_pool_serves_the_default_pool(tmp_path: Path) -> None:
    auth = load(tmp_path, entry("worker", token="w"))
    assert auth.authenticate(bearer("w"), WORKER_SERVICE_ROLES).pool == DEFAULT_POOL == "default"


def test_a_worker_caller_carries_its_pool(tmp_path: Path) -> None:
    auth = load(tmp_path, entry("worker", token="w", pool="gpu-a"))
    assert auth.authenticate(bearer("w"), WORKER_SERVICE_ROLES).pool == "gpu-a"


def test_an_admin_calls_job_service_under_its_own_tenant_and_pools(tmp_path: Path) -> None:
    auth = load(tmp_path, entry("admin", token="a", tenant="ops", pools=["onprem"]))
    caller = auth.authenticate(bearer("a"), JOB_SERVICE_ROLES)
    assert (caller.tenant, caller.role, caller.pools) == ("ops", Role.ADMIN, ("onprem",))
    assert caller.is_admin and caller.sees_all_tenants
    assert caller.tenant_scope is None


def test_an_admin_may_not_call_worker_service(tmp_path: Path) -> None:
    auth = load(tmp_path, entry("admin", token="a"))
    with pytest.raises(AuthError, match="admin token may not"):
        auth.authenticate(bearer("a"), WORKER_SERVICE_ROLES)


def test_a_client_sees_only_its_own_tenant(tmp_path: Path) -> None:
    caller = load(tmp_path, entry(token="t")).authenticate(bearer("t"), JOB_SERVICE_ROLES)
    assert not caller.sees_all_tenants
    assert caller.tenant_scope == "acme"


def test_open_mode_restricts_nothing_and_sees_the_header_tenant() -> None:
    caller = Authenticator(None).authenticate([("x-jobgate-tenant", "t1")], JOB_SERVICE_ROLES)
    assert caller == Caller("t1", None)
    assert (caller.pools, caller.weight, caller.pool) == (None, 1, None)
    assert caller.may_operate
    assert caller.tenant_scope == "t1"


def test_operator_methods_are_refused_to_clients_only() -> None:
    with pytest.raises(AuthError, match="ListQueues needs an admin token"):
        require_operator(Caller("acme", Role.CLIENT), "ListQueues")
    require_operator(Caller("ops", Role.ADMIN), "ListQueues")
    require_operator(Caller("default", None), "ListQueues")


def test_a_tenant_no_entry_names_is_unrestricted(tmp_path: Path) -> None:
    assert load(tmp_path, entry(pools=["a"])).policy("gone") == UNRESTRICTED
    assert Authenticator(None).policy("anyone") == UNRESTRICTED


def test_weights_list_every_tenant_the_file_names(tmp_path: Path) -> None:
    auth = load(tmp_path, entry(tenant="a", weight=3), entry(tenant="b"), entry("worker", "c"))
    assert auth.weights() == {"a": 3, "b": 1}


def test_named_pools_are_every_tenants_and_workers_pool(tmp_path: Path) -> None:
    auth = load(
        tmp_path,
        entry(tenant="a", pools=["onprem", "edge"]),
        entry("worker", pool="gpu-a"),
        entry("worker", tenant="w2"),
    )
    assert auth.named_pools() == ("default", "edge", "gpu-a", "onprem")
