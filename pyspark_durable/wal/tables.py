"""The table catalog of a namespace: names to ids, definitions, schema versions, and
where each table's entries are (regions, sequences, marks).

A table name maps to ``sha256(name)[:8]`` with the high bit set; an id is only ever
given explicitly (an ``int``), never read out of a name. A table's first definition
wins; new schema versions are appended by writers that set ``merge_schema`` and only
add nullable columns or widen types (:mod:`pyspark_durable.wal.format.schemas`).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import pyarrow as pa

from pyspark_durable.codec import codec_for
from pyspark_durable.codec.keys import U64_MAX
from pyspark_durable.errors import RoutingError, SchemaMismatch
from pyspark_durable.wal.arguments import check_step_arg
from pyspark_durable.wal.format.records import MarkRecord
from pyspark_durable.wal.format.schemas import fits, merge
from pyspark_durable.wal.format.table_records import (
    SchemaRecord,
    TableInfo,
    TableRecord,
    TablesRecord,
)
from pyspark_durable.wal.ledger import Ledger

log = logging.getLogger("pyspark_durable.wal.namespace")

HIGH_BIT = 1 << 63
EVOLVE_ATTEMPTS = 8  # schema versions racing writers append before ours lands


@functools.lru_cache(maxsize=4096)  # asked at every write: a hash of the name each time
def table_id_for_name(name: str) -> int:
    """A stable id for a table name (ids >= 2**63); small integers stay user ids."""
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") | HIGH_BIT


class TableCatalog:
    """A namespace's tables (``Namespace.tables``): lookups, definitions, and where
    their entries are; every answer a copy or a frozen record."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self.name = ledger.name

    def by_id(self, refresh: bool = True) -> dict[int, TableInfo]:
        """Table id -> table (a copy). ``refresh=False``: as of the last refresh."""
        ledger = self._ledger
        return dict((ledger.refreshed() if refresh else ledger.state).tables)

    def resolve(self, table: int | str) -> int:
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

    def lookup(self, table: int | str) -> TableInfo:
        """The table a name or id refers to, as this handle knows it; the log is read
        only for a table the handle does not know yet (a caller that needs a schema
        version another process may have added refreshes first)."""
        table_id = self.resolve(table)
        state = self._ledger.state
        info = state.tables.get(table_id) or self._ledger.refreshed().tables.get(table_id)
        if info is None:
            state = self._ledger.state
            known = ", ".join(t.name for t in state.tables.values()) or "none"
            kind = "table id" if isinstance(table, int) else "table"
            hint = ""
            by_id = [t for t in state.tables.values()
                     if isinstance(table, str) and t.name == table and t.table_id != table_id]
            if by_id:  # created by id, or by an older version from a numeric name
                hint = (f"; table id {by_id[0].table_id} is named {table!r} (created by id, or "
                        "from a numeric name by an older version): read it by its id, "
                        f"{by_id[0].table_id} in Python or tables=[{by_id[0].table_id}] in Spark")
            elif isinstance(table, str):
                hint = _name_hint(table, [t.name for t in state.tables.values()])
            raise RoutingError(f"unknown {kind} {table!r}; tables: {known}{hint}",
                               namespace=self.name)
        return info

    def define(
        self, table: int | str, schema: pa.Schema, payload_format: str = "arrow",
        merge_schema: bool = False,
    ) -> TableInfo:
        """The table rows of ``schema`` are written to, created if new.

        Rows fit the table when their columns are some of its columns, of its types or
        narrower ones of the same kind (missing columns are written null). With
        ``merge_schema``, rows that do not fit add a schema version: new nullable
        columns, lossless widenings. See :meth:`define_many`.
        """
        return self.define_many([(table, schema)], payload_format, merge_schema)[0]

    def define_many(
        self, wanted: Sequence[tuple[int | str, pa.Schema]], payload_format: str = "arrow",
        merge_schema: bool = False,
    ) -> list[TableInfo]:
        """The tables rows of each ``(table, schema)`` are written to (in that order),
        the new ones defined and the needed schema versions added in *one* record.

        A write of many new tables (a first step, a task routing rows to 1,000 tables)
        pays one fsync'd append of the commits log, not one per table; tables that
        exist and fit cost nothing (no append, no refresh). One definition is still a
        ``table`` record, one version a ``schema`` record, several a ``tables`` record.

        Why racing definers (threads, handles, processes) agree:

        - a name's id is ``sha256(name)[:8] | 2**63`` (:func:`table_id_for_name`), so
          every definer of a name computes the same id without asking anyone;
        - replay applies definitions in log order and the first one of an id wins (in
          every process alike, whether it came alone or in a ``tables`` record), so
          every definer, after appending, refreshes and takes the winner's definition,
          and checks its rows against it as if it had found it there;
        - a schema version ``v`` is computed against the table's newest *committed*
          version ``v - 1`` and only the first record of ``v`` wins; a loser merges
          again on top of the winner (at most ``EVOLVE_ATTEMPTS`` times). So a record
          never holds a version of a table it defines: if that definition lost, the
          version would land on top of another definer's schema it never saw.
        """
        ids = [self.resolve(t) for t, _ in wanted]
        asked: dict[int, tuple[str, list[pa.Schema]]] = {}  # id -> (name, its schemas)
        for table_id, (table, schema) in zip(ids, wanted, strict=True):
            codec_for(payload_format, schema)  # rejects unknown formats and unmappable types
            name = table if isinstance(table, str) else str(table_id)
            asked.setdefault(table_id, (name, []))[1].append(schema)
        try:
            plan: list[TableRecord | SchemaRecord] | None = self._plan(
                asked, payload_format, merge_schema)
        except SchemaMismatch:  # maybe another writer added the version our rows need
            plan = None
        if plan is None or plan:  # decided on what this handle knew: read the log first
            self._ledger.refreshed()
            plan = self._plan(asked, payload_format, merge_schema)
        for _ in range(EVOLVE_ATTEMPTS):
            if not plan:
                return [self._ledger.state.tables[i] for i in ids]
            tables = [r for r in plan if isinstance(r, TableRecord)]
            versions = [r for r in plan if isinstance(r, SchemaRecord)]
            self._ledger.append(plan[0] if len(plan) == 1 else
                                TablesRecord(tuple(tables), tuple(versions)))
            self._ledger.refreshed()  # the first definition, the first record of a version, wins
            for v in versions:
                log.info("namespace=%s table=%s: schema version %d is %s", self.name,
                         asked[v.table_id][0], v.version, _fmt(v.schema))
            plan = self._plan(asked, payload_format, merge_schema)
        names = ", ".join(asked[r.table_id][0] for r in plan)
        raise SchemaMismatch(f"the table's schema kept changing under {EVOLVE_ATTEMPTS} "
                             "merges by other writers; write again", namespace=self.name,
                             table=names)

    def _plan(self, asked: dict[int, tuple[str, list[pa.Schema]]], payload_format: str,
              merge_schema: bool) -> list[TableRecord | SchemaRecord]:
        """What to append so every asked schema fits its table, as of the ledger's state:
        a definition per new table, a version per table whose rows do not fit (the
        rows of all its asked schemas merged into one version)."""
        plan: list[TableRecord | SchemaRecord] = []
        for table_id, (name, schemas) in asked.items():
            where = {"namespace": self.name, "table": name}
            existing = self._ledger.state.tables.get(table_id)
            if existing is None:
                first = schemas[0]
                target = _fold(first, schemas[1:], merge_schema, where)
                plan.append(TableRecord(table_id, name, target, payload_format))
                continue
            if existing.payload_format != payload_format:
                raise SchemaMismatch(
                    f"payload format {payload_format!r} differs from the table's "
                    f"{existing.payload_format!r}", **where)
            target = _fold(existing.schema, schemas, merge_schema, where)
            if target is not existing.schema:
                codec_for(payload_format, target)
                plan.append(SchemaRecord(table_id, len(existing.schemas), target))
        return plan

    def region_pairs(self) -> frozenset[tuple[int, int]]:
        """The (region, table) pairs that hold committed entries (as of the last refresh)."""
        return frozenset(self._ledger.state.next_sequences)

    def regions(self, table_id: int) -> Mapping[int, int]:
        """Region -> next sequence number, for the regions holding entries of a table."""
        return MappingProxyType(self._ledger.state.table_regions(table_id))

    def marked_before(self, region_id: int, table_id: int) -> int:
        """The sequence below which entries of a (region, table) were marked deleted."""
        return self._ledger.state.marks.get((region_id, table_id), 0)

    def mark_deleted(self, table: int | str, sequence: int, region_id: int | None = None) -> None:
        """Entries of ``table`` in a region with sequence below ``sequence`` are not needed.

        Sequences count per (region, table): ``region_id`` may be left out only when
        the table's entries live in one region.
        """
        check_step_arg("sequence", sequence, self.name)
        info = self.lookup(table)
        state = self._ledger.state
        regions = state.table_regions(info.table_id)
        if region_id is None:
            if len(regions) > 1:
                raise RoutingError(f"table has entries in regions {sorted(regions)}: name the "
                                   "region whose sequences are marked", namespace=self.name,
                                   table=info.name)
            region_id = next(iter(regions), 0)
        check_step_arg("region", region_id, self.name)
        key = (region_id, info.table_id)
        current = state.marks.get(key, 0)
        limit = state.next_sequences.get(key, 0)
        if sequence > limit:
            raise RoutingError(f"sequence {sequence} is past the next sequence {limit} of the "
                               f"table in region {region_id}", namespace=self.name,
                               table=info.name, region=region_id)
        if sequence > current:
            self._ledger.append(MarkRecord(info.table_id, sequence, region_id))
            self._ledger.refreshed()


def _fold(schema: pa.Schema, more: list[pa.Schema], merge_schema: bool,
          where: dict[str, str]) -> pa.Schema:
    """``schema``, merged with each of ``more`` that does not fit it (``merge_schema``;
    otherwise :class:`SchemaMismatch`); ``schema`` itself when all of them fit."""
    for rows in more:
        if fits(rows, schema):
            continue
        try:
            merged = merge(schema, rows, what="the table")
        except SchemaMismatch as exc:  # a real type conflict: no option allows it
            raise SchemaMismatch(exc.args[0], **where) from None
        if not merge_schema:
            raise SchemaMismatch(
                f"rows have new columns or wider types: table has "
                f"{_fmt(schema)}, rows have {_fmt(rows)}; to add a schema "
                "version with them set .option(\"mergeSchema\", \"true\") (Spark) or "
                "merge_schema=True", **where)
        schema = merged
    return schema


def _fmt(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"


def _name_hint(name: str, known: list[str]) -> str:
    """A close name (a typo), or the JSON-list form for a name a comma list splits or
    strips (``tables='a,b'`` selects ``a`` and ``b``, never the table ``a,b``)."""
    split = [k for k in known if k != name and name.strip() in
             [k.strip(), *(p.strip() for p in k.split(",") if "," in k)]]
    if split:
        return (f"; did you mean the table {split[0]!r}? A name with a comma or edge spaces "
                f"is selected with the JSON-list form: tables='{json.dumps([split[0]])}'")
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
