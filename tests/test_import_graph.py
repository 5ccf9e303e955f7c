"""The dependency graph runs one way: client package <- servers, never back.

Every hand-written module's imports (top level and inside functions, read
from the AST) are checked against ALLOWED, the graph written as data. A new
arrow that is not in it fails here, naming the file and line. The second
half runs Python: `import jobgate` (and its client and worker) must load none
of the server-side modules at all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("jobgate", "serving", "gateway_server", "worker_server", "store")

# Layers, most specific first: a module belongs to the first that prefixes it.
LAYERS = (
    "jobgate.cli._servers",  # the lazily imported server commands
    "jobgate.console",  # the web console: the only user of the web stack
    "jobgate.cli._events",  # the lazily imported `jobgate events` (the store, no server)
    "jobgate.v1",  # the contract: generated stubs and the hand-written limits
    "jobgate.keda",  # KEDA's external scaler contract: generated stubs only
    "jobgate",  # what users import: client, worker daemon, CLI
    "serving",  # plumbing private to the servers
    "gateway_server",
    "worker_server",
    "store",
)

# The allowed arrows: layer -> what it may import (ours, by layer, and third
# parties by top-level name). A third party not named in THIRD_PARTY is free.
ALLOWED: dict[str, frozenset[str]] = {
    "jobgate.v1": frozenset({"jobgate.v1"}),
    "jobgate.keda": frozenset({"jobgate.keda"}),
    "jobgate": frozenset({"jobgate", "jobgate.v1", "jobgate.console", "grpc", "grpc_status"}),
    "jobgate.console": frozenset(
        {"jobgate.console", "jobgate", "jobgate.v1", "grpc", "grpc_status"}
        | {"starlette", "uvicorn", "jinja2"}
    ),
    # the composer: `serve --console-listen` runs the console too (imported when asked)
    "jobgate.cli._servers": frozenset(
        {"jobgate", "jobgate.v1", "jobgate.console", "serving", "gateway_server"}
        | {"worker_server", "store"}
    ),
    "jobgate.cli._events": frozenset({"jobgate", "jobgate.v1", "serving", "store"}),
    "serving": frozenset(
        {"serving", "store", "jobgate.v1", "jobgate", "prometheus_client", "grpc_health"}
        | {"grpc_reflection", "grpc", "grpc_status"}
    ),
    "gateway_server": frozenset(
        {"gateway_server", "serving", "store", "jobgate.v1", "jobgate.keda", "grpc"}
    ),
    "worker_server": frozenset({"worker_server", "serving", "store", "jobgate.v1", "grpc"}),
    "store": frozenset({"store", "redis", "jobgate.v1"}),
}
# Third parties whose use is restricted to the layers that list them above.
THIRD_PARTY = frozenset(
    {"redis", "prometheus_client", "grpc_health", "grpc_reflection", "grpc", "grpc_status"}
    | {"starlette", "uvicorn", "jinja2"}
)
# Modules of the jobgate layer that `serving` may use (shared formats and the
# stdlib-only race helper, not the client).
SERVING_MAY_USE_FROM_JOBGATE = frozenset({"jobgate._logs", "jobgate._address", "jobgate._race"})
# Modules of the contract that `store` may use: its vocabulary (limits, error
# reasons), which load no grpc and no stubs; never the stubs themselves.
STORE_MAY_USE_FROM_CONTRACT = frozenset({"jobgate.v1.limits", "jobgate.v1.errors"})
# The server-side commands are reached from the CLI's entry only, inside a function.
LAZY_ENTRY = "jobgate.cli"
LAZY_COMMANDS = ("jobgate.cli._servers", "jobgate.cli._events")


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    path: Path
    line: int
    lazy: bool  # inside a function: loaded only when it runs

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.source} -> {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def hand_written_modules() -> list[Path]:
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    return sorted(p for p in paths if "_pb2" not in p.name)


def imports_of(path: Path) -> list[tuple[str, int, bool]]:
    """(module, line, lazy) for every import in `path`, wherever the statement is."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    lazy_lines = {
        inner.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
        if isinstance(inner, ast.Import | ast.ImportFrom)
    }
    found: list[tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` may import a submodule: count both names.
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        found.extend((name, node.lineno, node.lineno in lazy_lines) for name in names)
    return found


def layer_of(module: str) -> str | None:
    for layer in LAYERS:
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def is_module(name: str) -> bool:
    """`name` is a module of ours (not a name imported from one)."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def forbidden(source: str, target: str, lazy: bool = False) -> bool:
    source_layer = layer_of(source)
    assert source_layer is not None
    target_layer = layer_of(target)
    if target_layer in LAZY_COMMANDS and source_layer != target_layer:
        return source != LAZY_ENTRY or not lazy
    allowed = ALLOWED[source_layer]
    if target_layer is None:
        top = target.split(".")[0]
        return top in THIRD_PARTY and top not in allowed
    if source_layer == "serving" and target_layer == "jobgate":
        return target not in SERVING_MAY_USE_FROM_JOBGATE
    if source_layer == "store" and target_layer == "jobgate.v1":
        return target not in STORE_MAY_USE_FROM_CONTRACT
    return target_layer not in allowed


def arrows() -> list[Arrow]:
    found = []
    for path in hand_written_modules():
        source = module_name(path)
        for target, line, lazy in imports_of(path):
            ours = layer_of(target) is not None
            if ours and not is_module(target):
                continue  # a name from a module, counted as the module itself
            found.append(Arrow(source, target, path, line, lazy))
    return found


def test_every_hand_written_module_belongs_to_a_layer() -> None:
    assert all(layer_of(module_name(path)) for path in hand_written_modules())


def test_no_module_imports_across_a_forbidden_arrow() -> None:
    bad = [str(a) for a in arrows() if forbidden(a.source, a.target, a.lazy)]
    assert not bad, "forbidden imports:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("jobgate.client._client", "serving.violations"),
        ("jobgate.worker._daemon", "store.model"),
        ("jobgate.cli._client", "serving.settings"),
        ("jobgate", "redis"),
        ("serving.runner", "gateway_server.server"),
        ("serving.settings", "jobgate.client"),
        ("gateway_server.job_service", "worker_server.convert"),
        ("worker_server.server", "gateway_server.server"),
        ("store.model", "jobgate.v1.job_pb2"),
        ("store.model", "jobgate.v1"),
        ("store.errors", "jobgate.errors"),
        ("store.policy", "jobgate.client"),
        ("store.errors", "grpc"),
        ("gateway_server.server", "redis"),
        ("jobgate.client._client", "jobgate.cli._servers"),
        ("jobgate.cli._console", "starlette.applications"),
        ("jobgate.client._client", "jinja2"),
        ("jobgate.console.app", "store.model"),
        ("jobgate.console.gateway", "serving.auth"),
        ("jobgate.cli._client", "jobgate.cli._events"),
        ("jobgate.cli._events", "gateway_server.server"),
        ("jobgate.cli._servers", "jobgate.cli._events"),
    ],
)
def test_the_graph_refuses_each_arrow_the_layering_forbids(source: str, target: str) -> None:
    assert forbidden(source, target)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("jobgate.cli._servers", "gateway_server.server"),
        ("gateway_server.job_service", "serving.shared"),
        ("serving.metrics", "store.model"),
        ("serving.logs", "jobgate._logs"),
        ("store.redis.connection", "redis"),
        ("jobgate.worker._context", "jobgate.v1.limits"),
        ("jobgate.console.app", "starlette.applications"),
        ("jobgate.console.pages", "jobgate.client"),
        ("jobgate.cli._console", "jobgate.console.settings"),
        ("store.policy", "jobgate.v1.limits"),
        ("store.errors", "jobgate.v1.errors"),
    ],
)
def test_the_graph_allows_the_arrows_the_design_draws(source: str, target: str) -> None:
    assert not forbidden(source, target)


@pytest.mark.parametrize("module", LAZY_COMMANDS)
def test_the_server_side_commands_are_reached_only_lazily_from_the_cli_entry(
    module: str,
) -> None:
    assert not forbidden("jobgate.cli", module, lazy=True)
    assert forbidden("jobgate.cli", module, lazy=False)


SERVER_SIDE = ("store", "redis", "prometheus_client", "gateway_server", "worker_server", "serving")


@pytest.mark.parametrize(
    "statement",
    [
        "import jobgate",
        "import jobgate.client",
        "import jobgate.worker",
        "from jobgate.cli import build_parser; build_parser(['submit', '--help'])",
        "from jobgate.cli import build_parser; build_parser(['worker', '--help'])",
    ],
)
def test_the_client_side_loads_no_server_module(statement: str) -> None:
    probe = (
        f"import sys\n{statement}\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_SIDE!r}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert loaded.stdout.strip() == "[]"


WEB_STACK = ("starlette", "uvicorn", "jinja2", "jobgate.console")


@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        ("import jobgate", WEB_STACK),
        ("from jobgate.cli import build_parser; build_parser(['submit', '--help'])", WEB_STACK),
        # The console's flags and refusals need no web stack (a missing extra is reported).
        ("from jobgate.cli import build_parser; build_parser(['console'])", WEB_STACK[:3]),
    ],
)
def test_the_web_stack_loads_only_when_the_console_runs(
    statement: str, absent: tuple[str, ...]
) -> None:
    probe = (
        f"import sys\n{statement}\n"
        f"print(sorted(m for m in sys.modules if m.startswith({absent!r})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert loaded.stdout.strip() == "[]"


def _loaded_by(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    probe = (
        f"import sys\n{statement}\n"
        f"print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded: list[str] = ast.literal_eval(run.stdout.strip())
    return loaded


CLIENT_SIDE = ("grpc", "jobgate.client", "jobgate.worker", "jobgate.errors", "jobgate.cli")


@pytest.mark.parametrize(
    "statement", ["import jobgate.v1.limits", "import jobgate.v1.errors", "import store"]
)
def test_the_contracts_vocabulary_loads_no_grpc_and_no_client(statement: str) -> None:
    # `import jobgate` is lazy (PEP 562), so the store can share these modules.
    assert _loaded_by(statement, CLIENT_SIDE) == []


def test_the_events_command_loads_the_store_but_no_server() -> None:
    statement = "from jobgate.cli import build_parser; build_parser(['events', '--help'])"
    loaded = _loaded_by(statement, ("store", "gateway_server", "worker_server", "jobgate.cli"))
    assert "store" in loaded
    assert "jobgate.cli._events" in loaded
    assert not [m for m in loaded if m.startswith(("gateway_server", "worker_server"))]
    assert "jobgate.cli._servers" not in loaded
