"""The journal probe runs its shapes on every embedded mode (proves the harness, not figures)."""

from __future__ import annotations

import pytest

from bench.journal_probe import probe


@pytest.mark.parametrize("shape", ["single", "batch"])
@pytest.mark.parametrize("mode", ["memory", "normal"])
async def test_the_probe_measures_each_shape_and_mode(shape: str, mode: str) -> None:
    cpu, wall = await probe(shape, mode, 200)

    assert cpu > 0 and wall > 0
