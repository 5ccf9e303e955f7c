"""A dataclass as a SQLite row, derived from its fields: the journal's one codec.

`RowCodec(cls)` reads `dataclasses.fields(cls)` and their resolved types
once, and gives every field a column: a plain `str`, `int` or `float` is
stored as is; `bool`, enums and `datetime` as their SQLite scalar; `X | None`
as NULL or X; containers (`dict`, `list`, fixed `tuple`, nested) as JSON
text, typed on the way back (bytes inside as base64). Top-level `bytes`
fields get no column: they are the blobs, stored in a table of their own so
rewriting a row (a claim, a heartbeat) never rewrites its payload.

A new field therefore needs no code here; a field of a type with no codec
fails at construction (TypeError naming it), never later on a write. Each
field's default, encoded, is the column's SQL default, so a file written
before the field existed gets it with `ALTER TABLE ... ADD COLUMN`.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import json
import operator
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]
SCALARS: Mapping[type, str] = {str: "TEXT", int: "INTEGER", float: "REAL"}


class Unloaded(bytes):
    """A blob left on disk at load (see `UNLOADED`); compares equal to b""."""


#: Stands in for a blob the loader did not read into memory; the journal
#: reads it back on first use and never writes it (the file holds it).
UNLOADED = Unloaded()


@dataclass(frozen=True)
class Column:
    """One field as one SQL column."""

    name: str
    sql_type: str  # TEXT, INTEGER, REAL (a SQLite type affinity)
    encode: Encode | None  # None: stored as is
    decode: Decode | None
    default_sql: str | None  # the encoded field default as an SQL literal, None: required


def _identity(value: Any) -> Any:
    return value


def _optional(inner: Encode) -> Encode:
    def convert(value: Any) -> Any:
        return None if value is None else inner(value)

    return convert


class _EnumDecoder:
    """value -> member by a dict lookup: Enum(value) costs ten times more, and a load
    decodes millions (the generated build subscripts `members` directly)."""

    def __init__(self, cls: type[enum.Enum]) -> None:
        self.members: dict[Any, enum.Enum] = dict(cls._value2member_map_)

    def __call__(self, value: Any) -> enum.Enum:
        return self.members[value]


def _enum_decoder(cls: type[enum.Enum]) -> Decode:
    return _EnumDecoder(cls)


def _from_timestamp(value: float) -> datetime:
    return datetime.fromtimestamp(value, tz=UTC)


def _json_codec(hint: Any, where: str) -> tuple[Encode, Decode]:
    """To and from a JSON-able value, for a type that may nest (dict, list, tuple)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in (str, int, float, bool) or hint is type(None):
        return _identity, _identity
    if hint is bytes:
        return (
            lambda value: base64.b64encode(value).decode("ascii"),
            lambda value: base64.b64decode(value),
        )
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return operator.attrgetter("value"), hint
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        (inner,) = [arg for arg in args if arg is not type(None)]
        to_json, from_json = _json_codec(inner, where)
        return _optional(to_json), _optional(from_json)
    if origin is dict:
        key_to, key_from = _json_codec(args[0], where)
        value_to, value_from = _json_codec(args[1], where)
        if args[0] is str:
            return (
                lambda value: {key_to(k): value_to(v) for k, v in value.items()},
                lambda value: {key_from(k): value_from(v) for k, v in value.items()},
            )
        # other keys (tuples, enums) as a list of [key, value] pairs
        return (
            lambda value: [[key_to(k), value_to(v)] for k, v in value.items()],
            lambda value: {key_from(k): value_from(v) for k, v in value},
        )
    if origin is list:
        item_to, item_from = _json_codec(args[0], where)
        return (
            lambda value: [item_to(item) for item in value],
            lambda value: [item_from(item) for item in value],
        )
    if origin is tuple and args and args[-1] is not Ellipsis:
        pairs = [_json_codec(arg, where) for arg in args]
        return (
            lambda value: [to(item) for (to, _), item in zip(pairs, value, strict=True)],
            lambda value: tuple(back(item) for (_, back), item in zip(pairs, value, strict=True)),
        )
    raise TypeError(f"{where}: no codec for type {hint!r}")


def json_value_codec(hint: Any, where: str) -> tuple[Encode, Decode]:
    """To and from a JSON-able value for `hint` (the journal's meta values)."""
    return _json_codec(hint, where)


def _immutable(hint: Any) -> bool:
    """Whether values of `hint` can never be changed in place (so may be shared)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union, tuple):
        return all(_immutable(arg) for arg in args if arg is not Ellipsis)
    return hint in (str, int, float, bool, bytes, type(None)) or (
        isinstance(hint, type) and issubclass(hint, enum.Enum)
    )


#: json.dumps(value, separators=(",", ":")), without a new JSONEncoder per call.
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode


def _container_codec(hint: Any, where: str) -> tuple[Encode, Decode]:
    to_json, from_json = _json_codec(hint, where)

    def decode(text: str) -> Any:
        return from_json(json.loads(text))

    if _immutable(hint):
        # many rows hold the same value (a finished job's outcome): parse each text once
        decode = functools.lru_cache(maxsize=4096)(decode)
    empties: dict[type, str] = {}

    def encode(value: Any) -> str:
        # Most rows' containers are empty (labels, a single job's children): their
        # text once per type. One prebuilt encoder: json.dumps with separators
        # builds a JSONEncoder per call (sealing was a fifth of a commit's cost).
        if not value:
            empty = empties.get(type(value))
            if empty is None:
                empty = empties[type(value)] = _COMPACT(to_json(value))
            return empty
        return _COMPACT(to_json(value))

    return encode, decode


_ENUM_VALUE = operator.attrgetter("value")


def _column(name: str, hint: Any, where: str) -> tuple[str, Encode | None, Decode | None]:
    """SQL type, encoder, decoder of one top-level field (None: stored as is)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union) and type(None) in args:
        (inner,) = [arg for arg in args if arg is not type(None)]
        sql_type, encode, decode = _column(name, inner, where)
        return (
            sql_type,
            None if encode is None else _optional(encode),
            None if decode is None else _optional(decode),
        )
    if hint is bool:
        return "INTEGER", int, bool
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        base = int if issubclass(hint, int) else str
        return SCALARS[base], _ENUM_VALUE, _enum_decoder(hint)
    if hint in SCALARS:
        return SCALARS[hint], None, None
    if hint is datetime:
        return "REAL", operator.methodcaller("timestamp"), _from_timestamp
    encode, decode = _container_codec(hint, where)
    return "TEXT", encode, decode


def _sql_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool | int | float):
        return repr(int(value) if isinstance(value, bool) else value)
    return "'" + str(value).replace("'", "''") + "'"


def _field_default(item: dataclasses.Field[Any]) -> tuple[bool, Callable[[], Any]]:
    """Whether the field has a default, and a maker of a fresh one."""
    if item.default is not dataclasses.MISSING:
        value = item.default
        return True, lambda: value
    if item.default_factory is not dataclasses.MISSING:
        return True, item.default_factory
    return False, lambda: None


def _with_default_fast_path(decode: Decode, stored_default: Any, make: Callable[[], Any]) -> Decode:
    """Most stored containers are the field's default ('{}', '[]'): skip the JSON parse."""

    def convert(value: Any) -> Any:
        return make() if value == stored_default else decode(value)

    return convert


class RowCodec(Generic[T]):
    """`cls` as (columns, blobs); see the module docstring.

    `key` names the primary-key field. `overrides` replaces the derived
    column of a field (the audit table stores the event's string id as an
    INTEGER key).
    """

    def __init__(
        self,
        cls: type[T],
        key: str,
        overrides: Mapping[str, tuple[str, Encode | None, Decode | None]] = {},
    ) -> None:
        self.cls = cls
        self.key = key
        hints = typing.get_type_hints(cls)
        columns: list[Column] = []
        blobs: list[str] = []
        order: list[str] = []
        for item in dataclasses.fields(cls):  # type: ignore[arg-type]
            order.append(item.name)
            hint = hints[item.name]
            if hint is bytes and item.name not in overrides:
                blobs.append(item.name)
                continue
            columns.append(self._column_of(item, hint, overrides.get(item.name)))
        if key not in {column.name for column in columns}:
            raise TypeError(f"{cls.__name__}: the key {key!r} must be a column field")
        self.columns: tuple[Column, ...] = tuple(columns)
        self.blobs: tuple[str, ...] = tuple(blobs)
        self.names: tuple[str, ...] = tuple(column.name for column in columns)
        self.row: Callable[[T], tuple[Any, ...]] = self._compile_row()
        self._blob_getters = [operator.attrgetter(name) for name in blobs]
        self._order: tuple[str, ...] = tuple(order)
        self._build = self._compile_build(order)

    def _column_of(
        self,
        item: dataclasses.Field[Any],
        hint: Any,
        override: tuple[str, Encode | None, Decode | None] | None,
    ) -> Column:
        where = f"{self.cls.__name__}.{item.name}"
        sql_type, encode, decode = override or _column(item.name, hint, where)
        has_default, make = _field_default(item)
        default_sql = None
        if has_default:
            stored = make() if encode is None else encode(make())
            default_sql = _sql_literal(stored)
            if decode is not None and sql_type == "TEXT" and isinstance(stored, str):
                decode = _with_default_fast_path(decode, stored, make)
        return Column(item.name, sql_type, encode, decode, default_sql)

    def _compile_build(
        self,
        order: Sequence[str],
        blob_args: Mapping[str, str] | None = None,
        constants: Mapping[str, Any] = {},
    ) -> Callable[..., T]:
        """One positional constructor call per row, generated once (as dataclasses
        generates __init__): a load builds a million objects, and a loop over
        the fields per row would triple its cost. `blob_args`: each blob
        field's expression (default: its value in `fills`), over `constants`."""
        namespace: dict[str, Any] = {"cls": self.cls, **constants}
        index = {name: i for i, name in enumerate(self.names)}
        args = []
        for name in order:
            if name not in index:
                default = f"fills[{self.blobs.index(name)}]"
                args.append(default if blob_args is None else blob_args[name])
                continue
            column = self.columns[index[name]]
            if column.decode is None:
                args.append(f"row[{index[name]}]")
            elif isinstance(column.decode, _EnumDecoder):  # a subscript, not a call
                namespace[f"members_{name}"] = column.decode.members
                args.append(f"members_{name}[row[{index[name]}]]")
            else:
                namespace[f"decode_{name}"] = column.decode
                args.append(f"decode_{name}(row[{index[name]}])")
        parameters = "row, fills" if blob_args is None else "row"
        source = f"def build({parameters}):\n    return cls({', '.join(args)})\n"
        exec(source, namespace)  # the source is built above from field names only
        build: Callable[..., T] = namespace["build"]
        return build

    def _compile_row(self) -> Callable[[T], tuple[Any, ...]]:
        """`row(obj)`: the column values of `obj`, in `names` order, encoded; one
        function made for the class (a loop over getters and encoders cost 3x)."""
        namespace: dict[str, Any] = {}
        values = []
        for column in self.columns:
            name = column.name
            if column.encode is None:
                values.append(f"obj.{name}")
            elif column.encode is _ENUM_VALUE:
                values.append(f"obj.{name}.value")
            else:
                namespace[f"encode_{name}"] = column.encode
                values.append(f"encode_{name}(obj.{name})")
        source = f"def row(obj):\n    return ({', '.join(values)},)\n"
        exec(source, namespace)  # the source is built above from field names only
        row: Callable[[T], tuple[Any, ...]] = namespace["row"]
        return row

    def blob_values(self, obj: T) -> list[bytes]:
        """The blob fields of `obj`, in `blobs` order."""
        return [get(obj) for get in self._blob_getters]

    def build(self, row: Sequence[Any], fill: bytes = b"") -> T:
        """An object from a row in `names` order, every blob field set to `fill`."""
        return self._build(row, (fill,) * len(self.blobs))

    def joined_builder(self, joined: Sequence[str], fill: bytes) -> Callable[[Sequence[Any]], T]:
        """An object from a row of `names` followed by the blob fields `joined`
        (each b"" when NULL: a LEFT JOIN found no row); the other blob fields `fill`."""
        at = len(self.names)
        expressions = {
            name: f"(row[{at + joined.index(name)}] or b'')" if name in joined else "fill"
            for name in self.blobs
        }
        build: Callable[[Sequence[Any]], T] = self._compile_build(
            self._order, expressions, {"fill": fill}
        )
        return build

    def key_of(self, obj: T) -> Any:
        key: Any = getattr(obj, self.key)
        return key
