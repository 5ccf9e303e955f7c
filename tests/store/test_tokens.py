"""Operation ids are unique per call, lease ids unguessable (store/tokens.py)."""

from __future__ import annotations

import multiprocessing
import re

from store import tokens


def test_operation_ids_never_repeat_in_a_process() -> None:
    ids = [tokens.operation_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)


def _child_operation_id(queue: multiprocessing.Queue[str]) -> None:
    queue.put(tokens.operation_id())


def test_a_forked_child_does_not_repeat_its_parents_operation_ids() -> None:
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[str] = context.Queue()
    parent_next = tokens.operation_id()
    child = context.Process(target=_child_operation_id, args=(queue,))
    child.start()
    from_child = queue.get(timeout=30)
    child.join(timeout=30)
    # Same counter position, but the child drew a prefix of its own.
    assert from_child[:16] != parent_next[:16]


def test_lease_ids_are_128_random_bits_each_and_distinct() -> None:
    ids = tokens.lease_ids(64)
    assert len(ids) == 64 and len(set(ids)) == 64
    assert all(re.fullmatch(r"[0-9a-f]{32}", lease_id) for lease_id in ids)


def test_no_lease_ids_for_a_claim_of_none() -> None:
    assert tokens.lease_ids(0) == []
