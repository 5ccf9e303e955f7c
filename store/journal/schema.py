"""The data file: its tables (derived from the codecs), its version, and the checks at open.

Tables, all derived from `RowCodec`s (store/journal/codec.py):
- `records`: one row per record, one column per non-bytes field, keyed by
  the codec's key, WITHOUT ROWID; a partial index on `expire_at` finds
  what the TTL removes, another the records without one (what a restart
  loads first).
- `blob_<field>`: one table per bytes field (payload, result), one row per
  record whose value is not empty, so a row rewrite never copies a payload.
- `events`: the audit trail, keyed by the event's number.
- `meta`: store-wide values that no record holds (name -> JSON).

Evolution without code: a field added to the record dataclass becomes a
column added at open (`ALTER TABLE ... ADD COLUMN` with the field's default);
a new bytes field a new blob table. Anything else (a removed or retyped
field, a changed meaning) bumps `SCHEMA_VERSION` with a migration here. A
file with a newer version, or with a column this code does not know (written
by a newer jobgate), is refused: writing whole rows back would drop it.

Cheap corruption check (`check_header`): the 100-byte SQLite header (magic,
page size, format versions) and a file size that is a whole number of pages;
then SQLite parses the schema at open, and the load reads every record, event
and meta row, so a garbled page among those fails the start too. Not caught
at start (a full `PRAGMA quick_check` reads every page, too slow for a
million jobs): pages holding blobs that stay on disk (terminal jobs'
payloads), index pages and free pages; those surface as an UNAVAILABLE
answer when first read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.journal.codec import RowCodec
from store.journal.errors import DataDirRefused

SCHEMA_VERSION = 1
DB_NAME = "jobgate.db"
SQLITE_MAGIC = b"SQLite format 3\x00"
EXPIRE_FIELD = "expire_at"


@dataclass(frozen=True)
class Tables:
    """The codecs the file is made of."""

    records: RowCodec[Any]
    events: RowCodec[Any]

    def blob_table(self, name: str) -> str:
        return f"blob_{name}"


def corrupt(path: Path, why: str) -> DataDirRefused:
    return DataDirRefused(
        f"{path} is corrupt ({why}); jobgate does not start on it. Move the directory "
        "aside to start empty, or restore it from a backup"
    )


def check_header(path: Path) -> None:
    """Refuse a file that is not a whole SQLite database (see the module docstring)."""
    size = path.stat().st_size
    if size == 0:
        return  # SQLite's own "new database"
    with path.open("rb") as file:
        head = file.read(100)
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise corrupt(path, "not an SQLite database")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise corrupt(path, f"page size {page_size} in the header")
    if head[18] not in (1, 2) or head[19] not in (1, 2):
        raise corrupt(path, "unknown file format version in the header")
    if size % page_size:
        raise corrupt(path, f"{size} bytes is not a whole number of {page_size}-byte pages")


def _create_table(name: str, codec: RowCodec[Any], key_sql: str, suffix: str = "") -> str:
    columns = []
    for column in codec.columns:
        spec = f"{column.name} {column.sql_type}"
        if column.name == codec.key:
            spec += f" {key_sql}"
        elif column.default_sql is not None:
            spec += f" DEFAULT {column.default_sql}"
        columns.append(spec)
    return f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(columns)}){suffix}"


def _ddl(tables: Tables) -> list[str]:
    statements = [
        _create_table("records", tables.records, "PRIMARY KEY NOT NULL", " WITHOUT ROWID"),
        _create_table("events", tables.events, "PRIMARY KEY"),
        "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ]
    if EXPIRE_FIELD in tables.records.names:
        statements.append(
            f"CREATE INDEX IF NOT EXISTS records_expiry ON records ({EXPIRE_FIELD}) "
            f"WHERE {EXPIRE_FIELD} IS NOT NULL"
        )
        # the records a restart loads first (store/journal/writer.py load_open)
        key = tables.records.key
        statements.append(
            f"CREATE INDEX IF NOT EXISTS records_open ON records ({key}) "
            f"WHERE {EXPIRE_FIELD} IS NULL"
        )
    for name in tables.records.blobs:
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {tables.blob_table(name)} "
            "(id TEXT PRIMARY KEY, data BLOB NOT NULL)"
        )
    return statements


def prepare(con: sqlite3.Connection, tables: Tables, path: Path) -> None:
    """Create a new file's tables, or check an existing one and add new fields' columns."""
    version = int(con.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise DataDirRefused(
            f"{path} was written by a newer jobgate (schema {version}; this one reads up to "
            f"{SCHEMA_VERSION}); run that version, or move the directory aside"
        )
    con.execute("BEGIN IMMEDIATE")
    try:
        for table, codec in (("records", tables.records), ("events", tables.events)):
            _add_new_columns(con, table, codec, path)
        for statement in _ddl(tables):
            con.execute(statement)
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _add_new_columns(con: sqlite3.Connection, table: str, codec: RowCodec[Any], path: Path) -> None:
    present = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
    if not present:
        return  # a new file: created below
    unknown = sorted(set(present) - set(codec.names))
    if unknown:
        raise DataDirRefused(
            f"{path}: table {table} has columns this jobgate does not know "
            f"({', '.join(unknown)}): written by a newer version? Run that version"
        )
    for column in codec.columns:
        if column.name in present:
            continue
        if column.default_sql is None:
            raise DataDirRefused(
                f"{path}: {codec.cls.__name__}.{column.name} is new and has no default, "
                "so old rows cannot get it; give it a default or a schema migration"
            )
        con.execute(
            f"ALTER TABLE {table} ADD COLUMN {column.name} {column.sql_type} "
            f"DEFAULT {column.default_sql}"
        )


def record_select(tables: Tables, where: str, joined: Sequence[str]) -> str:
    """Every column of the records `where` holds, then the data of each blob
    field in `joined` (NULL when the record has none): one query, the joins
    done by SQLite rather than a lookup per record."""
    codec = tables.records
    columns = [f"r.{name}" for name in codec.names]
    joins = []
    for number, name in enumerate(joined):
        columns.append(f"b{number}.data")
        joins.append(
            f"LEFT JOIN {tables.blob_table(name)} AS b{number} ON b{number}.id = r.{codec.key}"
        )
    return f"SELECT {', '.join(columns)} FROM records AS r {' '.join(joins)} WHERE {where}"


def open_records(tables: Tables) -> tuple[str, str]:
    """The conditions (on `r`) of the records a restart loads first (no expiry set: live
    work and the groups it belongs to) and of the rest (finished, loaded behind them)."""
    if EXPIRE_FIELD not in tables.records.names:
        return "1", "0"
    # The unary + keeps SQLite off records_expiry for the finished ones: most of the
    # table, which a scan reads faster than a key lookup per row (900k: 5.5 -> 5.2 s).
    return f"r.{EXPIRE_FIELD} IS NULL", f"+r.{EXPIRE_FIELD} IS NOT NULL"


def insert_sql(table: str, names: Sequence[str], key: str | None = None) -> str:
    """INSERT of a whole row; with `key`, an existing row of that key is updated in
    place (an upsert: cheaper than INSERT OR REPLACE, which deletes the row and its
    index entries, then inserts them all again)."""
    marks = ", ".join("?" * len(names))
    sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})"
    if key is not None:
        updates = ", ".join(f"{name} = excluded.{name}" for name in names if name != key)
        sql += f" ON CONFLICT ({key}) DO UPDATE SET {updates}"
    return sql
