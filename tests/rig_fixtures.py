"""What the fault rigs' fixtures share (tests/faults, tests/cluster): closing the
rigs a test built, with their logs in a failed test's report.

A conftest that builds rigs imports `pytest_runtest_makereport` from here (a
hook counts only where a conftest holds it), so `close_rigs` can tell a failed
test from a passed one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from tests.faults.rig import Rig


async def close_rigs(rigs: Sequence[Rig], request: pytest.FixtureRequest) -> None:
    """Close each rig (workers, then servers), attaching its logs if the test failed."""
    failed = getattr(request.node, "rep_call", None)
    for rig in rigs:
        if failed is not None and failed.failed:
            request.node.add_report_section("call", "fault rig logs", rig.logs())
        await rig.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep the call phase's report on the item, for close_rigs."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
