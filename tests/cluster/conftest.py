"""Cluster fixtures: three masters for the session, and a cluster with replicas to fail over."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.rig import ClusterRig
from tests.cluster_servers import ClusterDeployment
from tests.rig_fixtures import close_rigs, tracked_rigs
from tests.rig_fixtures import pytest_runtest_makereport as pytest_runtest_makereport

#: JOBGATE_SOAK=1: the fault scenarios here run longer (more jobs, more faults).
SOAK = os.environ.get("JOBGATE_SOAK") == "1"
SHORT_TIMEOUT = 120
SOAK_TIMEOUT = 3600

ClusterRigFactory = Callable[..., ClusterRig]


def scaled(short: int, soak: int) -> int:
    return soak if SOAK else short


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fault scenarios get a deadline fitting the mode (the project default is 60 s)."""
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here and item.get_closest_marker("scenario"):
            item.add_marker(pytest.mark.timeout(SOAK_TIMEOUT if SOAK else SHORT_TIMEOUT))


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterDeployment]:
    """Three masters, no replicas, for every test that kills nothing (one costs ~2 s to start)."""
    cluster = ClusterDeployment(tmp_path_factory.mktemp("cluster"), masters=3).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[ClusterDeployment]:
    """Three masters with one replica each: this test may kill a master."""
    cluster = ClusterDeployment(tmp_path / "cluster", masters=3, replicas=1).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[ClusterDeployment]:
    """Three masters, no replicas, that this test may reshape (move a slot)."""
    cluster = ClusterDeployment(tmp_path / "cluster", masters=3).start()
    yield cluster
    cluster.stop()


@pytest.fixture
async def make_cluster_rig(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[ClusterRigFactory]:
    """Build fault rigs on a cluster; each is closed (workers, then servers) after the test,
    its logs attached to a failed test's report."""
    rigs = tracked_rigs(request)

    def make(cluster: ClusterDeployment, **options: Any) -> ClusterRig:
        rig = ClusterRig(tmp_path / f"rig{len(rigs)}", cluster, **options)
        rigs.append(rig)
        return rig

    yield make
    await close_rigs(rigs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scenario: a fault scenario (deadline set by the mode)")
