"""Job ids (ULIDs) and the partition each names: crc32(id) % partitions."""

from __future__ import annotations

import binascii
import random
import time

from ulid import ULID

# Crockford's base32, ULID's alphabet.
_BASE32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_SUFFIX_BITS = 10  # the last two characters of a ULID
_SUFFIXES = [(a + b).encode() for a in _BASE32 for b in _BASE32]
_RANDOM_BITS = 80


def new_ulid() -> str:
    return str(ULID())


def partition_of(key: str, partitions: int) -> int:
    """The partition of a job id or a tenant: crc32 % partitions."""
    return binascii.crc32(key.encode()) % partitions


def _ulid_text(value: int) -> str:
    return "".join(_BASE32[(value >> shift) & 31] for shift in range(125, -1, -5))


class PartitionIds:
    """ULIDs in increasing order (within this process), each in the partition asked for.

    Drawn by rejection: the next values after the last id are tried until
    one's crc32 lands in the partition (N tries expected). The last two
    characters vary fastest, so a try costs one crc32 of two bytes over the
    prefix's. Claim order does not rest on ids (queue scores decide it).
    """

    def __init__(self, partitions: int) -> None:
        self._partitions = partitions
        self._last = 0

    def new(self, partition: int) -> str:
        now = time.time_ns() // 1_000_000
        fresh = (now << _RANDOM_BITS) | random.getrandbits(_RANDOM_BITS - 1)
        value = max(fresh, self._last + 1)
        while True:
            block = value >> _SUFFIX_BITS
            prefix = _ulid_text(block << _SUFFIX_BITS)[:-2]
            crc = binascii.crc32(prefix.encode())
            for low in range(value & ((1 << _SUFFIX_BITS) - 1), 1 << _SUFFIX_BITS):
                if binascii.crc32(_SUFFIXES[low], crc) % self._partitions == partition:
                    self._last = (block << _SUFFIX_BITS) | low
                    return prefix + _SUFFIXES[low].decode()
            value = (block + 1) << _SUFFIX_BITS
