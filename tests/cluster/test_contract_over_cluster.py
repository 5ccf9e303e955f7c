"""The whole store contract suite, re-run on a redis+cluster:// store.

The contract tests come from tests/store unchanged; only `store_url` differs:
every store here reaches its partition's slot through redis-py's cluster
client, seeded with all three masters of the session's cluster. Partitions
are named per test, so they land on different masters; the suite runs on one
partition and on a RedisStore of three ("redis3"), whose calls
span masters (pipelined head reads, positions, merged audit streams).
"""

from __future__ import annotations

import pytest

from tests.cluster_servers import ClusterDeployment
from tests.store.conftest import make_store, pushed_wake_ups_only, store
from tests.store.test_contract_batch import *  # noqa: F403
from tests.store.test_contract_cancel import *  # noqa: F403
from tests.store.test_contract_claim import *  # noqa: F403
from tests.store.test_contract_failures import *  # noqa: F403
from tests.store.test_contract_fleet import *  # noqa: F403
from tests.store.test_contract_groups import *  # noqa: F403
from tests.store.test_contract_observe import *  # noqa: F403
from tests.store.test_contract_recovery import *  # noqa: F403
from tests.store.test_contract_release import *  # noqa: F403
from tests.store.test_contract_report_and_claim import *  # noqa: F403
from tests.store.test_contract_submit import *  # noqa: F403
from tests.store.test_contract_transitions import *  # noqa: F403
from tests.store.test_contract_ttl import *  # noqa: F403

pytestmark = pytest.mark.redis

__all__ = ["make_store", "pushed_wake_ups_only", "store"]  # fixtures, used by name


@pytest.fixture(params=["redis", "redis3"])
def backend(request: pytest.FixtureRequest) -> str:
    """One partition, and three (whose hash tags land on different masters)."""
    return str(request.param)


@pytest.fixture
def store_url(shared_cluster: ClusterDeployment) -> str:
    return shared_cluster.url
