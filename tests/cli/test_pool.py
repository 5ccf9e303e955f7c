"""`jobgate submit --pool`: the job, a group's children and a batch's lines ask for a pool."""

from __future__ import annotations

import json
from pathlib import Path

from jobgate.cli._client import read_batch, read_group
from tests.cli.fake_cli import FakeCli
from tests.client.fake_job_service import FakeJobService


async def test_submit_pool_asks_for_that_pool(service: FakeJobService, fake_cli: FakeCli) -> None:
    ran = await fake_cli.run("submit", "--model", "m", "--data", "x", "--pool", "onprem")

    assert ran.code == 0, ran.err
    assert service.calls("Submit")[0].request.job.pool == "onprem"


async def test_submit_without_pool_leaves_it_to_the_server(
    service: FakeJobService, fake_cli: FakeCli
) -> None:
    await fake_cli.run("submit", "--model", "m", "--data", "x")

    assert service.calls("Submit")[0].request.job.pool == ""


def test_pool_is_the_default_of_group_children_that_name_none(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps([{"model": "a"}, {"model": "a", "pool": "cloud"}]))

    children = read_group(str(path), None, "onprem")

    assert [child.pool for child in children] == ["onprem", "cloud"]


def test_pool_is_the_default_of_batch_lines_that_name_none(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_text('{"model": "a", "pool": "cloud"}\n{"model": "a"}\n')

    [(_, first), (_, second)] = read_batch(str(path), None, "onprem")

    assert (first.job.pool, second.job.pool) == ("cloud", "onprem")
