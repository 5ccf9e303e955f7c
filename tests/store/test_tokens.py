"""Operation ids are unique per call, lease ids unguessable (store/tokens.py)."""

from __future__ import annotations

import re
import subprocess
import sys

from store import tokens


def test_operation_ids_never_repeat_in_a_process() -> None:
    ids = [tokens.operation_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)


# Forks in a fresh interpreter: this test process has threads (gRPC's, handler
# pools) that a fork would copy half-way.
FORK_AND_COMPARE = """
import os
from store import tokens
parent = tokens.operation_id()
read, write = os.pipe()
if os.fork() == 0:
    os.write(write, tokens.operation_id().encode())
    os._exit(0)
os.wait()
child = os.read(read, 100).decode()
print(parent[:16], child[:16])
"""


def test_a_forked_child_does_not_repeat_its_parents_operation_ids() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORK_AND_COMPARE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    parent_prefix, child_prefix = done.stdout.split()
    assert child_prefix != parent_prefix  # the child drew a prefix of its own


def test_lease_ids_are_128_random_bits_each_and_distinct() -> None:
    ids = tokens.lease_ids(64)
    assert len(ids) == 64 and len(set(ids)) == 64
    assert all(re.fullmatch(r"[0-9a-f]{32}", lease_id) for lease_id in ids)


def test_no_lease_ids_for_a_claim_of_none() -> None:
    assert tokens.lease_ids(0) == []
