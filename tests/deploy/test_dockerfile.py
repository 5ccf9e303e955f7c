"""deploy/Dockerfile, checked without a Docker engine (none runs here).

What can break an image build without anyone noticing: a COPY of a path that
moved, a package left out of the builder, package data (the Lua scripts, the
.pyi stubs) missing from the wheel the runtime stage installs. The wheel is
built here the way the builder stage builds it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.deploy.tools import DEPLOY, REPO, require_module

DOCKERFILE = DEPLOY / "Dockerfile"


def instructions(keyword: str) -> list[str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return re.findall(rf"^{keyword}\s+(.+)$", text, re.MULTILINE)


def test_every_copy_source_exists_in_the_repository() -> None:
    for copy in instructions("COPY"):
        if copy.startswith("--from"):
            continue
        *sources, _destination = copy.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: no such path"


def test_builder_copies_every_package_the_distribution_ships() -> None:
    copied = {copy.split()[0] for copy in instructions("COPY")}
    for package in ("jobgate", "store", "serving", "gateway_server", "worker_server"):
        assert package in copied
    assert {"pyproject.toml", "constraints.txt", "README.md"} <= set(
        instructions("COPY")[0].split()[:-1]
    )


def test_runtime_runs_as_a_non_root_user_with_a_grpc_health_check() -> None:
    (user,) = instructions("USER")
    assert not user.startswith(("root", "0"))
    (healthcheck,) = instructions("HEALTHCHECK")
    assert '"/app/healthcheck.py"' in healthcheck
    assert "COPY deploy/healthcheck.py ./healthcheck.py" in DOCKERFILE.read_text()
    (exposed,) = instructions("EXPOSE")
    assert set(exposed.split()) == {"50051", "50052", "9464"}


def test_the_data_directory_exists_owned_by_the_runtime_user() -> None:
    # A named volume mounted on /data (deploy/compose.single-node.yaml) takes
    # the owner of the image's /data; missing, it is root's and serve cannot write.
    (user,) = instructions("USER")
    uid, _, gid = user.partition(":")
    runs = " ".join(instructions("RUN"))
    assert re.search(rf"install -d -o {uid} -g {gid or uid} (-m \d+ )?/data\b", runs), runs


def builder_stage_copies() -> list[str]:
    """The paths the builder stage COPYs into its build context (until the next FROM)."""
    text = DOCKERFILE.read_text()
    builder = text[text.index(" AS builder") : text.index(" AS runtime")]
    paths = []
    for line in re.findall(r"^COPY\s+(.+)$", builder, re.MULTILINE):
        paths += line.split()[:-1]
    return paths


def test_the_builder_stage_builds_a_wheel_carrying_the_package_data(tmp_path: Path) -> None:
    require_module("setuptools", "the wheel is built with setuptools, as pyproject.toml says")
    # Exactly what the builder stage has: its COPYs, nothing else.
    source = tmp_path / "src"
    for path in builder_stage_copies():
        if (REPO / path).is_dir():
            shutil.copytree(
                REPO / path, source / path, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(REPO / path, source / path)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = tmp_path.glob("jobgate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "jobgate/cli/__init__.py" in names
    assert "serving/runner.py" in names
    assert "gateway_server/server.py" in names
    assert "worker_server/server.py" in names
    assert any(re.fullmatch(r"store/lua/\w+\.lua", n) for n in names), "Lua scripts missing"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "jobgate = jobgate.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
