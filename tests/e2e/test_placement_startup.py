"""A server refuses to start on a bad placement or fair-share setting (issue 19, part 3).

Seen as the operator sees it: the process exits non-zero with one line that
names the file and the entry's key (or the flag), never a traceback and never
a server that starts and enforces something else. The parsing itself is
tested key by key in tests/servers/test_auth_file.py; here each kind of
refusal the issue lists is an exit.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    FAST_SETTINGS,
    ServerProcess,
    Token,
    auth_entry,
    run_to_exit,
)
from tests.redis_server import RedisServer


def entry(role: str = "client", tenant: str = "acme", **keys: Any) -> dict[str, Any]:
    return {**auth_entry(Token(uuid.uuid4().hex, tenant, role)), **keys}


BAD_FILES: list[tuple[str, list[dict[str, Any]], str]] = [
    ("pools not a list", [entry(pools="onprem")], "tokens[0].pools"),
    ("a malformed name in pools", [entry(pools=["On Prem"])], "tokens[0].pools[0]"),
    ("empty pools", [entry(pools=[])], "tokens[0].pools"),
    ("a malformed worker pool", [entry("worker", pool="GPU A")], "tokens[0].pool"),
    ("weight 0", [entry(weight=0)], "tokens[0].weight"),
    ("weight 1001", [entry(weight=1001)], "tokens[0].weight"),
    ("weight not an integer", [entry(weight="3")], "tokens[0].weight"),
    ("pool on a client entry", [entry(pool="onprem")], "tokens[0].pool"),
    ("pools on a worker entry", [entry("worker", pools=["onprem"])], "tokens[0].pools"),
    ("weight on a worker entry", [entry("worker", weight=2)], "tokens[0].weight"),
    (
        "two entries of a tenant with different pools",
        [entry(pools=["onprem"]), entry(pools=["onprem", "cloud"])],
        "tokens[1].pools",
    ),
    (
        "a second entry of a restricted tenant without pools",
        [entry(pools=["onprem"]), entry()],
        "tokens[1].pools",
    ),
    (
        "two entries of a tenant with different weights",
        [entry(weight=3), entry(weight=1)],
        "tokens[1].weight",
    ),
]


def write(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"tokens": entries}))
    return path


def assert_refused(code: int, output: str, *mentions: str) -> None:
    """A non-zero exit with one error line naming every one of `mentions` (a warning
    logged before it, such as Redis without persistence, may precede it)."""
    assert code != 0, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if ": error: " in line]
    assert len(errors) == 1, output
    for mention in mentions:
        assert mention in errors[0], output


@pytest.mark.parametrize(
    ("entries", "named"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES]
)
def test_serve_refuses_to_start_on_a_bad_auth_file_naming_it_and_the_entry(
    tmp_path: Path, entries: list[dict[str, Any]], named: str
) -> None:
    path = write(tmp_path / "auth.json", entries)

    code, output = run_to_exit("serve", {"auth-file": str(path)})

    assert_refused(code, output, str(path), named)


@pytest.mark.redis
@pytest.mark.parametrize("command", ["gateway", "worker-server"])
def test_the_split_servers_refuse_a_bad_auth_file_too(
    tmp_path: Path, redis_server: RedisServer, command: str
) -> None:
    path = write(tmp_path / "auth.json", [entry("worker", pools=["onprem"])])
    settings = {"auth-file": str(path), "redis-url": redis_server.url}

    code, output = run_to_exit(command, {**settings, "redis-partition": f"p{uuid.uuid4().hex[:8]}"})

    assert_refused(code, output, str(path), "tokens[0].pools")


@pytest.mark.parametrize(
    ("settings", "env", "named"),
    [
        ({"fair-share": "weighted"}, {}, "--fair-share"),
        ({}, {"JOBGATE_FAIR_SHARE": "round-robin"}, "JOBGATE_FAIR_SHARE"),
    ],
    ids=["flag", "environment"],
)
def test_serve_refuses_an_unknown_fair_share_mode_naming_the_setting(
    settings: dict[str, str], env: dict[str, str], named: str
) -> None:
    code, output = run_to_exit("serve", settings, env=env)

    assert_refused(code, output, named)


@pytest.mark.redis
@pytest.mark.parametrize(
    ("first", "second", "command"),
    [("tenant", "off", "worker-server"), ("off", "tenant", "gateway")],
)
def test_a_server_of_another_fair_share_mode_than_its_deployments_refuses_to_start(
    tmp_path: Path, redis_server: RedisServer, first: str, second: str, command: str
) -> None:
    shared = {**FAST_SETTINGS, "redis-url": redis_server.url}
    shared["redis-partition"] = f"p{uuid.uuid4().hex[:8]}"
    founder = ServerProcess("gateway", tmp_path / "founder.log", {**shared, "fair-share": first})
    founder.start()
    try:
        founder.wait_serving()  # the first server records the deployment's mode

        code, output = run_to_exit(command, {**shared, "fair-share": second})
    finally:
        assert founder.terminate() == 0, founder.log_tail()

    assert_refused(code, output, f"--fair-share {first}", f"--fair-share {second}")


@pytest.mark.redis
def test_a_server_of_the_deployments_fair_share_mode_joins_it(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    shared = {**FAST_SETTINGS, "redis-url": redis_server.url, "fair-share": "off"}
    shared["redis-partition"] = f"p{uuid.uuid4().hex[:8]}"
    founder = ServerProcess("gateway", tmp_path / "founder.log", shared)
    joiner = ServerProcess("worker-server", tmp_path / "joiner.log", shared)
    founder.start()
    try:
        founder.wait_serving()
        joiner.start()
        joiner.wait_serving()
    finally:
        assert joiner.terminate() == 0, joiner.log_tail()
        assert founder.terminate() == 0, founder.log_tail()
