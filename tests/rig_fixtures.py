"""What the fault rigs' fixtures share (tests/faults, tests/cluster): the rigs a
test built, closed after it, their logs in a failed test's report.

A conftest that builds rigs imports `pytest_runtest_makereport` from here (a
hook counts only where a conftest holds it). The logs go into the call
phase's report as it is made: a section added at teardown would land in the
teardown's report, which passed, and pytest shows no sections of a pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from tests.faults.rig import Rig

_RIGS = pytest.StashKey[list[Rig]]()


def tracked_rigs(request: pytest.FixtureRequest) -> list[Rig]:
    """The list a rig fixture appends this test's rigs to (their logs go with a failure)."""
    rigs: list[Rig] = []
    request.node.stash[_RIGS] = rigs
    return rigs


async def close_rigs(rigs: Sequence[Rig]) -> None:
    """Close each rig: workers, then servers."""
    for rig in rigs:
        await rig.close()


def attach_rig_logs(item: pytest.Item, report: pytest.TestReport) -> None:
    """For a failed test's call, add the logs of every rig it built to its report."""
    if report.when == "call" and report.failed:
        for rig in item.stash.get(_RIGS, []):
            report.sections.append(("fault rig logs", rig.logs()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report gets the logs of every rig it built."""
    outcome = yield
    attach_rig_logs(item, outcome.get_result())  # type: ignore[attr-defined]
