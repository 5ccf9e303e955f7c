"""Cluster fixtures: three masters for the session, and a cluster with replicas to fail over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_servers import ClusterDeployment


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
