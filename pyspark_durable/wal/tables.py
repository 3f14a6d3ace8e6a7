"""Tables of a namespace: names to ids, definitions and schema versions.

A table name maps to ``sha256(name)[:8]`` with the high bit set; an id is only ever
given explicitly (an ``int``), never read out of a name. A table's first definition
wins; new schema versions are appended by writers that set ``merge_schema`` and only
add nullable columns or widen types (:mod:`pyspark_durable.wal.schemas`).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import pyarrow as pa

from pyspark_durable.codec import codec_for
from pyspark_durable.codec.keys import U64_MAX
from pyspark_durable.errors import RoutingError, SchemaMismatch
from pyspark_durable.wal.records import CommitRecord, SchemaRecord, TableInfo, TableRecord
from pyspark_durable.wal.schemas import fits, merge

if TYPE_CHECKING:
    from pyspark_durable.wal.state import NamespaceState

log = logging.getLogger("pyspark_durable.wal.namespace")

HIGH_BIT = 1 << 63
EVOLVE_ATTEMPTS = 8  # schema versions racing writers append before ours lands


def table_id_for_name(name: str) -> int:
    """A stable id for a table name (ids >= 2**63); small integers stay user ids."""
    import hashlib

    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") | HIGH_BIT


class NamespaceTables:
    """Table lookups and definitions, mixed into
    :class:`~pyspark_durable.wal.namespace.Namespace`."""

    name: str
    state: NamespaceState
    _lock: threading.RLock

    def refresh(self) -> NamespaceState:  # pragma: no cover - Namespace's
        raise NotImplementedError

    def append_record(self, record: CommitRecord) -> int:  # pragma: no cover - Namespace's
        raise NotImplementedError

    def tables(self, refresh: bool = True) -> dict[int, TableInfo]:
        """Table id -> table (a copy). ``refresh=False``: as of the last refresh."""
        return dict((self.refresh() if refresh else self.state).tables)

    def resolve_table(self, table: int | str) -> int:
        """A table reference to its id: an ``int`` is an id, a ``str`` is always a name.

        A name is never read as a number: ``"7"``, ``"007"`` and ``"\u0667"`` are three
        tables, none of them table id 7 (ids are asked for explicitly, as an ``int``).
        """
        if isinstance(table, bool):
            raise RoutingError(f"table {table!r} is not a name (str) or id (int)",
                               namespace=self.name)
        if isinstance(table, int):
            if not 0 <= table <= U64_MAX:
                raise RoutingError(f"table id {table} is not a u64", namespace=self.name)
            return table
        if isinstance(table, str) and table:
            return table_id_for_name(table)
        raise RoutingError(f"table {table!r} is not a name (non-empty str) or id (int)",
                           namespace=self.name)

    def table(self, table: int | str) -> TableInfo:
        table_id = self.resolve_table(table)
        info = self.state.tables.get(table_id) or self.refresh().tables.get(table_id)
        if info is None:
            known = ", ".join(t.name for t in self.state.tables.values()) or "none"
            kind = "table id" if isinstance(table, int) else "table"
            hint = ""
            by_id = [t for t in self.state.tables.values()
                     if isinstance(table, str) and t.name == table and t.table_id != table_id]
            if by_id:  # created by id, or by an older version from a numeric name
                hint = (f"; table id {by_id[0].table_id} is named {table!r} (created by id, or "
                        "from a numeric name by an older version): read it by its id, "
                        f"{by_id[0].table_id} in Python or tables=[{by_id[0].table_id}] in Spark")
            raise RoutingError(f"unknown {kind} {table!r}; tables: {known}{hint}",
                               namespace=self.name)
        return info

    def define_table(
        self, table: int | str, schema: pa.Schema, payload_format: str = "arrow",
        merge_schema: bool = False,
    ) -> TableInfo:
        """The table rows of ``schema`` are written to, created if new.

        Rows fit the table when their columns are some of its columns, of its types or
        narrower ones of the same kind (missing columns are written null). With
        ``merge_schema``, rows that do not fit add a schema version: new nullable
        columns, lossless widenings. Racing writers each append the version they want;
        the first record of a version number wins, the others merge again on top of it.
        """
        table_id = self.resolve_table(table)
        codec_for(payload_format, schema)  # rejects unknown formats and unmappable types
        name = table if isinstance(table, str) else str(table_id)
        where = {"namespace": self.name, "table": name}
        for _ in range(EVOLVE_ATTEMPTS):
            existing = self.state.tables.get(table_id) or self.refresh().tables.get(table_id)
            if existing is None:
                self.append_record(TableRecord(table_id, name, schema, payload_format))
                existing = self.refresh().tables[table_id]  # the first definition wins
            if existing.payload_format != payload_format:
                raise SchemaMismatch(
                    f"payload format {payload_format!r} differs from the table's "
                    f"{existing.payload_format!r}", **where)
            if fits(schema, existing.schema):
                return existing
            newest = self.refresh().tables[table_id]  # another writer may have merged already
            if newest is not existing:
                continue
            try:
                merged = merge(existing.schema, schema, what="the table")
            except SchemaMismatch as exc:  # a real type conflict: no option allows it
                raise SchemaMismatch(exc.args[0], **where) from None
            if not merge_schema:
                raise SchemaMismatch(
                    f"rows have new columns or wider types: table has "
                    f"{_fmt(existing.schema)}, rows have {_fmt(schema)}; to add a schema "
                    "version with them set .option(\"mergeSchema\", \"true\") (Spark) or "
                    "merge_schema=True", **where)
            codec_for(payload_format, merged)
            self.append_record(SchemaRecord(table_id, len(existing.schemas), merged))
            self.refresh()
            log.info("namespace=%s table=%s: schema version %d is %s", self.name, name,
                     len(existing.schemas), _fmt(merged))
        raise SchemaMismatch(f"the table's schema kept changing under {EVOLVE_ATTEMPTS} "
                             "merges by other writers; write again", **where)


def _fmt(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"
