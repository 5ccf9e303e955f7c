"""The store contract's submit and claim files, re-run on a redis+sentinel:// store.

The contract tests come from tests/store unchanged; only `store_url` differs:
every store here finds its primary through the module's three sentinels.
"""

from __future__ import annotations

import pytest

from tests.sentinel_servers import SentinelDeployment
from tests.store.conftest import make_store, pushed_wake_ups_only, store
from tests.store.test_contract_claim import *  # noqa: F403
from tests.store.test_contract_fleet import *  # noqa: F403
from tests.store.test_contract_submit import *  # noqa: F403

pytestmark = pytest.mark.redis

__all__ = ["make_store", "pushed_wake_ups_only", "store"]  # fixtures, used by name


@pytest.fixture
def backend() -> str:
    return "redis"


@pytest.fixture
def store_url(shared_sentinels: SentinelDeployment) -> str:
    return shared_sentinels.url
