"""The cluster rig itself: fewer masters than `redis-cli --cluster create` accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster_servers import ClusterDeployment

pytestmark = pytest.mark.redis


def test_one_master_cluster_serves_every_slot(tmp_path: Path) -> None:
    cluster = ClusterDeployment(tmp_path, masters=1).start()
    try:
        (only,) = cluster.nodes
        assert cluster.owner(0) is only and cluster.owner(16383) is only
    finally:
        cluster.stop()


def test_two_masters_split_the_slots_between_them(tmp_path: Path) -> None:
    cluster = ClusterDeployment(tmp_path, masters=2).start()
    try:
        first, second = cluster.nodes
        assert cluster.owner(8191) is first and cluster.owner(8192) is second
        assert cluster.primaries() == sorted(cluster.nodes, key=lambda node: node.port)
    finally:
        cluster.stop()


def test_replicas_under_three_masters_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="3 masters"):
        ClusterDeployment(tmp_path, masters=1, replicas=1)
