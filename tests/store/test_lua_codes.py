"""Every negative code a Lua script returns maps to one store exception, and back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from store.codes import LuaCode, error_for
from store.errors import StoreError
from store.redis.scripts import read_script, script_names

LUA_DIR = Path(__file__).resolve().parents[2] / "store" / "lua"
# `return {RC.X}` from a script, or `return RC.X` from an include's function.
RETURN_CODE = re.compile(r"return\s*(?:\{\s*)?RC\.([A-Z_]+)\b")
LITERAL_CODE = re.compile(r"return\s*(?:\{\s*)?-\d+")


def _returned_codes() -> set[int]:
    """The codes the scripts return, by the `RC.<name>` the policy include defines."""
    codes: set[int] = set()
    for path in LUA_DIR.rglob("*.lua"):
        codes.update(LuaCode[name].value for name in RETURN_CODE.findall(path.read_text()))
    return codes


@pytest.mark.parametrize("path", sorted(LUA_DIR.rglob("*.lua")), ids=lambda path: path.name)
def test_no_script_returns_a_literal_code(path: Path) -> None:
    assert not LITERAL_CODE.search(path.read_text())


def test_the_scripts_return_some_negative_codes() -> None:
    assert _returned_codes()


@pytest.mark.parametrize("code", sorted(_returned_codes()))
def test_every_returned_code_is_in_the_enum(code: int) -> None:
    assert code in {member.value for member in LuaCode}


ERROR_CODES = [member for member in LuaCode if member is not LuaCode.KEYS_NEEDED]


@pytest.mark.parametrize("member", ERROR_CODES)
def test_every_enum_code_becomes_a_store_error_with_a_reason_or_field(member: LuaCode) -> None:
    error = error_for(member.value, "01J00000000000000000000000", max_group_children=10)
    assert isinstance(error, StoreError)
    assert type(error) is not StoreError
    assert error.reason or getattr(error, "field", "")


@pytest.mark.parametrize("member", list(LuaCode))
def test_every_enum_code_is_returned_by_some_script(member: LuaCode) -> None:
    assert member.value in _returned_codes()


def test_keys_needed_is_not_an_error() -> None:
    # a request to declare more keys and call again: RedisStore handles it
    with pytest.raises(ValueError):
        error_for(LuaCode.KEYS_NEEDED)


def test_an_unknown_code_is_refused() -> None:
    with pytest.raises(ValueError):
        error_for(-999)


@pytest.mark.parametrize("name", script_names())
def test_every_script_has_a_header_naming_its_keys_and_output(name: str) -> None:
    text = (LUA_DIR / f"{name}.lua").read_text()
    text = text.removeprefix("#!lua flags=allow-oom\n")  # Redis 7's shebang, first if any
    header = text.split("]]", 1)[0]
    assert text.startswith("--[[")
    assert "KEYS[1" in header
    assert "Output:" in header
    assert "Transitions:" in header


@pytest.mark.parametrize("name", script_names())
def test_every_include_resolves(name: str) -> None:
    assert "@include" not in read_script(name).source
