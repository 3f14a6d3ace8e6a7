"""The ``durablewal`` Python data source (thin adapters over the WAL's endpoints)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import DataSource
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from pyspark_durable.errors import ConfigError, SchemaMismatch
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.session_cache import namespace_for
from pyspark_durable.spark.sink import WalBatchWriter, WalStreamWriter, normalize_schema
from pyspark_durable.spark.source import METADATA_FIELDS, ReadPlan, WalBatchReader, WalStreamReader


def _payload_schema(plan_opts: WalOptions) -> tuple[pa.Schema | None, frozenset[int] | None]:
    """The Arrow schema shared by the selected tables (None if there is no table yet)."""
    ns = namespace_for(plan_opts)
    tables = ns.tables()
    if plan_opts.tables is not None:
        chosen = [ns.table(t) for t in plan_opts.tables]
    else:
        chosen = [t for t in tables.values()
                  if plan_opts.regions is None or t.region_id in plan_opts.regions]
    ids = None if plan_opts.tables is None else frozenset(t.table_id for t in chosen)
    if not chosen:
        return None, ids
    first = chosen[0]
    for other in chosen[1:]:
        if not other.schema.equals(first.schema):
            raise SchemaMismatch(
                f"tables {first.name!r} and {other.name!r} have different schemas; choose "
                "tables of one schema with option tables", namespace=ns.name)
    return normalize_schema(first.schema), ids


class DurableWalDataSource(DataSource):
    """``format("durablewal")``: stream and batch reads and writes of a WAL namespace."""

    @classmethod
    def name(cls) -> str:
        return "durablewal"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = WalOptions.parse(options)

    def schema(self) -> StructType:
        payload, _ = _payload_schema(self.opts)
        if payload is None:
            raise ConfigError(
                "namespace has no tables yet, so there is no schema to read; write to it "
                "first or give the reader a .schema(...)", namespace=self.opts.namespace)
        return from_arrow_schema(pa.schema(list(payload) + list(METADATA_FIELDS)))

    def _plan(self, schema: StructType) -> ReadPlan:
        payload, ids = _payload_schema(self.opts)
        meta_names = {f.name for f in METADATA_FIELDS}
        if payload is None:  # nothing written yet: trust the user's schema
            given = [f for f in schema.fields if f.name not in meta_names]
            from pyspark.sql.pandas.types import to_arrow_schema

            payload = to_arrow_schema(StructType(given), timezone="UTC")
        full = pa.schema(list(payload) + list(METADATA_FIELDS))
        if schema == from_arrow_schema(full) or [f.name for f in schema.fields] == full.names:
            arrow, with_meta = full, True
        elif schema == from_arrow_schema(payload) or [f.name for f in schema.fields] == \
                payload.names:
            arrow, with_meta = payload, False
        else:
            raise SchemaMismatch(
                f"the given schema {schema.simpleString()} does not match the table's "
                f"{from_arrow_schema(full).simpleString()}", namespace=self.opts.namespace)
        regions = None if self.opts.regions is None else frozenset(self.opts.regions)
        return ReadPlan(self.opts, ids, regions, arrow, with_meta)

    def reader(self, schema: StructType) -> WalBatchReader:
        return WalBatchReader(self._plan(schema))

    def streamReader(self, schema: StructType) -> WalStreamReader:
        return WalStreamReader(self._plan(schema))

    def writer(self, schema: StructType, overwrite: bool) -> WalBatchWriter:
        self._check_write(overwrite)
        return WalBatchWriter(self.opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> WalStreamWriter:
        self._check_write(overwrite)
        return WalStreamWriter(self.opts)

    def _check_write(self, overwrite: bool) -> None:
        if overwrite:
            raise ConfigError("a WAL is append-only: use mode('append'), not overwrite",
                              namespace=self.opts.namespace)
