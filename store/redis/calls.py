"""One script call with declared keys (store/lua/includes/declared.lua), as data.

A `ScriptCall` names the script, its own KEYS and ARGV, what it declares
(job ids, models, raw keys) and what comes after the declared groups (an
operation key stays last). `Partition.call` runs it until it stops asking
for keys; a KEYS_NEEDED answer changed nothing, so the call is simply made
again with more declared (and the same operation key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from store.codes import LuaCode
from store.errors import StoreError
from store.keys import Declared, Keys
from store.redis.connection import text
from store.redis.pools import StoreClient
from store.redis.scripts import ArgValue

# A script that meets undeclared job ids or models (a parent, held children,
# a job's model...) is called again with them declared at most this many
# times in all; each round declares what the previous one found.
DECLARE_ROUNDS = 4


@dataclass
class ScriptCall:
    """KEYS: (the transition keys), `keys`, (the index keys), the declared groups, `trailing`;
    ARGV: (the common args), `args`, the declaration tail."""

    script: str
    args: Sequence[ArgValue]
    declared: Declared = field(default_factory=Declared)
    keys: Sequence[str] = ()
    trailing: Sequence[str] = ()
    #: Names the call in errors and metrics; the script's name when empty.
    operation: str = ""
    #: Whether the script takes common.lua's transition KEYS and ARGV first.
    transition: bool = True
    #: The RPC pool unless given (recovery and leadership run on their own).
    client: StoreClient | None = None

    @property
    def name(self) -> str:
        return self.operation or self.script

    def keys_and_args(
        self, keys: Keys, common: Sequence[ArgValue]
    ) -> tuple[list[str], list[ArgValue]]:
        fixed = (
            [*keys.transition_keys(), *self.keys, *keys.index_keys()]
            if self.transition
            else list(self.keys)
        )
        first = list(common) if self.transition else []
        return (
            [*fixed, *keys.declared_keys(self.declared), *self.trailing],
            [*first, *self.args, *self.declared.tail(len(fixed) + 1)],
        )


def texts(items: Sequence[Any]) -> list[str]:
    return [text(item) for item in items]


def keys_needed(reply: Any) -> bool:
    """True for a script's {KEYS_NEEDED, ids, models, keys} (nothing changed)."""
    return (
        isinstance(reply, list)
        and len(reply) == 4
        and isinstance(reply[0], int)
        and reply[0] == LuaCode.KEYS_NEEDED
    )


def declare_needed(script: str, declared: Declared, needed: Sequence[Any]) -> None:
    """Declare what a script asked for ({ids, models, keys}); it must be new."""
    ids, models, raw = needed
    if not declared.add(texts(ids), texts(models), texts(raw)):
        raise StoreError(f"{script}.lua asked again for keys it was given")
