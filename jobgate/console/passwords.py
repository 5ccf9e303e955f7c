"""Console users with hashed passwords: the format, hashing and checking.

A users file holds one `NAME:HASH` per line (`#` starts a comment). HASH is

    scrypt$<log2 N>$<r>$<p>$<salt>$<key>

with salt and key in unpadded URL-safe base64: the standard library's
`hashlib.scrypt`, memory-hard, with its cost carried in the string so a
stronger setting later still checks old lines. `jobgate console
--hash-password NAME` prints such a line. Checking costs one scrypt run
(about 50 ms at the default cost) whether or not the user exists, so timing
does not tell which names are real.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

SCHEME = "scrypt"
#: 2**15 rounds, r=8, p=1: OWASP's minimum for scrypt (32 MiB per check).
DEFAULT_LOG2_N = 15
DEFAULT_R = 8
DEFAULT_P = 1
_SALT_BYTES = 16
_KEY_BYTES = 32
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


class UsersFileError(ValueError):
    """The users file is missing or malformed (a start-up error)."""


@dataclass(frozen=True)
class Cost:
    log2_n: int = DEFAULT_LOG2_N
    r: int = DEFAULT_R
    p: int = DEFAULT_P

    def derive(self, password: str, salt: bytes) -> bytes:
        n = 1 << self.log2_n
        # hashlib's default maxmem (32 MiB) is below what N=2**15, r=8 needs.
        maxmem = 2 * 128 * self.r * (n + self.p + 1)
        return hashlib.scrypt(
            password.encode(), salt=salt, n=n, r=self.r, p=self.p, maxmem=maxmem, dklen=_KEY_BYTES
        )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str, cost: Cost = Cost()) -> str:
    """A new HASH for `password` with a fresh random salt."""
    salt = secrets.token_bytes(_SALT_BYTES)
    key = cost.derive(password, salt)
    return f"{SCHEME}${cost.log2_n}${cost.r}${cost.p}${_b64(salt)}${_b64(key)}"


@dataclass(frozen=True)
class PasswordHash:
    cost: Cost
    salt: bytes
    key: bytes

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        parts = text.split("$")
        if len(parts) != 6 or parts[0] != SCHEME:
            raise ValueError(f"expected {SCHEME}$<log2 N>$<r>$<p>$<salt>$<key>")
        try:
            cost = Cost(int(parts[1]), int(parts[2]), int(parts[3]))
            salt, key = _unb64(parts[4]), _unb64(parts[5])
        except ValueError:
            raise ValueError("cost must be integers and salt/key base64") from None
        if not (1 <= cost.log2_n <= 20 and 1 <= cost.r <= 32 and 1 <= cost.p <= 16):
            raise ValueError("cost out of range (log2 N 1..20, r 1..32, p 1..16)")
        if not salt or len(key) != _KEY_BYTES:
            raise ValueError(f"salt must be non-empty and key {_KEY_BYTES} bytes")
        return cls(cost, salt, key)

    def matches(self, password: str) -> bool:
        return hmac.compare_digest(self.cost.derive(password, self.salt), self.key)


class Users:
    """The users of a users file; `check` answers whether a name and password match."""

    def __init__(self, hashes: dict[str, PasswordHash]) -> None:
        self._hashes = dict(hashes)
        # Checked against when the name is unknown, so both paths cost one scrypt.
        self._decoy = PasswordHash(Cost(), b"decoy-salt", bytes(_KEY_BYTES))

    def __len__(self) -> int:
        return len(self._hashes)

    def check(self, name: str, password: str) -> bool:
        """True when `name` exists and `password` is its password (blocking: one scrypt)."""
        known = self._hashes.get(name)
        matched = (known or self._decoy).matches(password)
        return known is not None and matched

    @classmethod
    def load(cls, path: str) -> Users:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise UsersFileError(f"cannot read users file {path}: {error.strerror}") from None
        hashes: dict[str, PasswordHash] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, colon, encoded = line.partition(":")
            where = f"users file {path}, line {number}"
            if not colon or not USER_NAME.fullmatch(name):
                raise UsersFileError(f"{where}: expected NAME:HASH with a plain name")
            if name in hashes:
                raise UsersFileError(f"{where}: user {name} appears twice")
            try:
                hashes[name] = PasswordHash.parse(encoded)
            except ValueError as error:
                raise UsersFileError(f"{where}: {error}") from None
        if not hashes:
            raise UsersFileError(f"users file {path} names no user")
        return cls(hashes)
