"""The commits-log records that define tables (``table``, ``schema``, ``tables``), and
:class:`TableInfo`, a table as replay knows it once they are applied.

A table's records carry its Arrow schemas (base64 of the IPC-serialized schema); they
are the only records that do, and the snapshot stores a table in the same form
(:meth:`TableInfo.snapshot_json`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pyspark_durable.wal.format.commit_record import CommitRecord, record_kind


def schema_to_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@record_kind("table")
@dataclass(frozen=True, slots=True)
class TableRecord(CommitRecord):
    """A table definition with its schema version 0 (the first one of an id wins)."""

    table_id: int
    name: str
    schema: pa.Schema
    payload_format: str

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "id": self.table_id, "name": self.name,
                "schema": schema_to_b64(self.schema), "format": self.payload_format}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TableRecord:
        # an old record's `region` (a table bound to one region) is ignored: tables span regions
        return cls(d["id"], d["name"], schema_from_b64(d["schema"]), d["format"])

    def info(self) -> TableInfo:
        return TableInfo(self.table_id, self.name, (self.schema,), self.payload_format)


@record_kind("schema")
@dataclass(frozen=True, slots=True)
class SchemaRecord(CommitRecord):
    """Schema version ``version`` of a table (the first record of a version wins)."""

    table_id: int
    version: int
    schema: pa.Schema

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "table": self.table_id, "v": self.version,
                "schema": schema_to_b64(self.schema)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SchemaRecord:
        return cls(d["table"], d["v"], schema_from_b64(d["schema"]))


@record_kind("tables")
@dataclass(frozen=True, slots=True)
class TablesRecord(CommitRecord):
    """Several table definitions and schema versions appended as one record.

    A write that defines 1,000 new tables appends one record (one fsync'd append)
    instead of 1,000. Replay applies each definition as if it were its own ``table``
    record, then each version as its own ``schema`` record, so their rules hold
    unchanged: the first definition of an id wins, the first record of a version wins.
    A writer puts in ``versions`` only versions of tables defined *before* this record
    (:meth:`TableCatalog.define_many`): a version is computed against the
    table's committed newest schema, never against a definition that may lose.

    Stored with each distinct schema once (``schemas``), referred to by index: the
    tables of one write usually share their schema.
    """

    tables: tuple[TableRecord, ...] = ()
    versions: tuple[SchemaRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        schemas: dict[str, int] = {}  # base64 schema -> its index

        def index(schema: pa.Schema) -> int:
            return schemas.setdefault(schema_to_b64(schema), len(schemas))
        tables = [[t.table_id, t.name, index(t.schema), t.payload_format] for t in self.tables]
        versions = [[v.table_id, v.version, index(v.schema)] for v in self.versions]
        return {"k": self.kind, "schemas": list(schemas), "tables": tables,
                "versions": versions}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TablesRecord:
        schemas = [schema_from_b64(s) for s in d["schemas"]]

        def schema(i: int) -> pa.Schema:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(schemas):
                raise ValueError(f"schema index {i!r} is not one of the {len(schemas)} schemas")
            return schemas[i]
        return cls(tuple(TableRecord(t, n, schema(s), f) for t, n, s, f in d["tables"]),
                   tuple(SchemaRecord(t, v, schema(s)) for t, v, s in d["versions"]))

    def records(self) -> tuple[TableRecord | SchemaRecord, ...]:
        """The definitions, then the versions, in the order replay applies them."""
        return (*self.tables, *self.versions)


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table: its name, its schema versions (oldest first) and its payload format.

    Schema versions only ever add nullable columns or widen types (see
    :mod:`pyspark_durable.wal.format.schemas`), so rows of any version read as the newest.
    """

    table_id: int
    name: str
    schemas: tuple[pa.Schema, ...]
    payload_format: str

    @property
    def schema(self) -> pa.Schema:
        """The newest schema version."""
        return self.schemas[-1]

    @property
    def version(self) -> int:
        return len(self.schemas) - 1

    def snapshot_json(self) -> dict[str, Any]:
        """The ``table`` record that defines the table, plus its later schema versions."""
        record = TableRecord(self.table_id, self.name, self.schemas[0], self.payload_format)
        return {**record.to_json(), "schemas": [schema_to_b64(s) for s in self.schemas[1:]]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> TableInfo:
        """A snapshot's table (:meth:`snapshot_json`)."""
        first = TableRecord.from_json(d).info()
        return TableInfo(first.table_id, first.name,
                         (*first.schemas, *(schema_from_b64(s) for s in d.get("schemas", ()))),
                         first.payload_format)

    def with_version(self, schema: pa.Schema) -> TableInfo:
        return TableInfo(self.table_id, self.name, (*self.schemas, schema), self.payload_format)
