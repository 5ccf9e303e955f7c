"""Filter editing for the quick filters, and the merged walk behind /failed."""

from __future__ import annotations

import pytest

from jobgate.console.listing import MergedCursor, merged_page, split_terms, term_value, with_term
from jobgate.v1 import job_pb2


def test_terms_split_on_and_but_not_inside_quotes() -> None:
    expression = 'status = FAILED AND labels.note = "a AND b" AND model=m'
    assert split_terms(expression) == ["status = FAILED", 'labels.note = "a AND b"', "model=m"]


def test_with_term_replaces_the_fields_equality_and_keeps_the_rest() -> None:
    expression = 'status = QUEUED AND create_time >= "2026-12-01T00:00:00Z"'
    assert with_term(expression, "status", "FAILED") == (
        'create_time >= "2026-12-01T00:00:00Z" AND status = FAILED'
    )


def test_with_term_and_no_value_drops_the_field() -> None:
    assert with_term("status = QUEUED AND model = m", "status", "") == "model = m"


def test_with_term_quotes_a_value_that_is_not_bare() -> None:
    assert with_term("", "labels.note", 'say "hi"') == 'labels.note = "say \\"hi\\""'


def test_term_value_reads_a_quoted_value_back() -> None:
    assert term_value(with_term("", "model", 'a "b"'), "model") == 'a "b"'
    assert term_value("status = FAILED", "model") == ""


def job(number: int) -> job_pb2.Job:
    made = job_pb2.Job(id=f"{number:026d}")
    made.create_time.FromSeconds(number)
    return made


class Walks:
    """ListJobs over fixed lists, newest first, `size` a page, tokens = offsets."""

    def __init__(self, walks: dict[str, list[int]], size: int) -> None:
        self.walks = {name: sorted(numbers, reverse=True) for name, numbers in walks.items()}
        self.size = size
        self.reads = 0

    async def read(self, name: str, token: str) -> tuple[list[job_pb2.Job], str]:
        self.reads += 1
        start = int(token or 0)
        numbers = self.walks[name][start : start + self.size]
        more = start + self.size < len(self.walks[name])
        return [job(n) for n in numbers], str(start + self.size) if more else ""


async def walk_all(walks: Walks, size: int) -> list[list[int]]:
    pages: list[list[int]] = []
    cursor = MergedCursor(("", ""))
    while True:
        shown, cursor = await merged_page(walks.read, ["a", "b"], cursor, size)
        pages.append([int(j.id) for j in shown])
        if cursor.done:
            return pages
        cursor = MergedCursor.decode(cursor.encode(), 2)


@pytest.mark.parametrize(("read_size", "page_size"), [(2, 3), (3, 2), (10, 4), (1, 1)])
async def test_the_merged_walk_shows_each_job_once_newest_first(
    read_size: int, page_size: int
) -> None:
    walks = Walks({"a": [1, 4, 5, 9, 10], "b": [2, 3, 6, 7, 8, 11]}, read_size)
    pages = await walk_all(walks, page_size)
    assert [n for page in pages for n in page] == list(range(11, 0, -1))
    assert all(len(page) == page_size for page in pages[:-1])


async def test_a_merged_walk_over_nothing_is_one_empty_page() -> None:
    assert await walk_all(Walks({"a": [], "b": []}, 5), 5) == [[]]


@pytest.mark.parametrize("token", ["", "!!!", "e30", "eyJ0IjogWyIiXSwgImEiOiBudWxsfQ"])
def test_a_token_that_is_not_ours_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="page token"):
        MergedCursor.decode(token or "x", 2)
