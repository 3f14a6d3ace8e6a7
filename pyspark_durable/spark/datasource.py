"""The ``durablewal`` Python data source (thin adapters over the WAL's endpoints)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from pyspark_durable.codec import codec_for
from pyspark_durable.errors import ConfigError, LogNotFound, SchemaMismatch, UnknownNamespace
from pyspark_durable.spark.arrow_types import (
    check_writable,
    normalize_schema,
    read_schema,
    spark_schema,
    spark_type_name,
)
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.pushdown import spark_is_pushing
from pyspark_durable.spark.session_cache import namespace_for
from pyspark_durable.spark.sink import WalBatchWriter, WalStreamWriter, check_event_time_column
from pyspark_durable.spark.source import (
    PushdownBatchReader,
    ReadPlan,
    WalBatchReader,
    WalStreamReader,
)
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.format.schemas import union_by_name
from pyspark_durable.wal.metadata import METADATA_NAMES, metadata_fields

PICK_NAMESPACE = '.option("namespace", NAME)'


def _open_for_read(opts: WalOptions) -> Namespace:
    """The namespace to read. Spark shows a data source's error as the last line of a
    traceback under its own, so a name that is no namespace is one message whose first
    words name it and the fix, with the namespaces the WAL holds as the endpoint judges
    them (no Spark checkpoint or stray folder among them; a read without ``namespace``
    reads 'default', which a WAL often lacks)."""
    try:
        return namespace_for(opts, create=False)
    except UnknownNamespace as exc:
        where = exc.location or "the WAL"
        default = (' (the default: no .option("namespace", ...) was given)'
                   if opts.namespace == "default" else "")
        if exc.names:
            fix = (f"pick one with {PICK_NAMESPACE}; namespaces in {where}: "
                   f"{', '.join(exc.names)}")
        else:
            missing = f" ({exc.root_missing})" if exc.root_missing else ""
            fix = (f"{where} holds no namespace{missing}: point the read at the WAL root (the "
                   "path or brokers its writer was given), or write to it first")
        raise LogNotFound(f"unknown namespace {opts.namespace!r}{default}: {fix}") from None


def _payload_schema(opts: WalOptions, strict: bool = False
                    ) -> tuple[pa.Schema | None, frozenset[int] | None]:
    """The selected tables' columns, unioned by name (None if there is no table yet).

    ``strict`` (no schema given by the user): an unknown table or region in the
    ``tables`` / ``regions`` options is an error listing the valid ones. With a
    user's schema they are allowed: a stream may wait for them to be written.
    """
    ns = _open_for_read(opts)
    # namespace_for caught the handle up: no second round trip
    tables = ns.tables.by_id(refresh=False)
    if strict and opts.regions is not None:
        known = ns.info.regions()
        unknown = [r for r in opts.regions if r not in known]
        if unknown:
            raise ConfigError(
                f"option regions: no region {', '.join(map(str, unknown))} in the namespace; "
                f"regions with data: {', '.join(map(str, known)) or 'none'}",
                namespace=ns.name)
    if opts.tables is not None:
        if strict:
            chosen = [ns.tables.lookup(t) for t in opts.tables]  # unknown: RoutingError listing them
        else:
            chosen = [tables[i] for i in map(ns.tables.resolve, opts.tables) if i in tables]
        ids = frozenset(map(ns.tables.resolve, opts.tables))
    else:
        in_regions = None if opts.regions is None else {
            t for r, t in ns.tables.region_pairs() if r in opts.regions}
        chosen = [t for t in tables.values()
                  if in_regions is None or t.table_id in in_regions]
        ids = None
    if not chosen:
        return None, ids
    try:
        union = union_by_name([(t.name, normalize_schema(t.schema)) for t in chosen],
                              type_name=spark_type_name)
    except SchemaMismatch as exc:
        raise SchemaMismatch(exc.args[0], namespace=ns.name) from None
    return union, ids


class DurableWalDataSource(DataSource):
    """``format("durablewal")``: stream and batch reads and writes of a WAL namespace."""

    @classmethod
    def name(cls) -> str:
        return "durablewal"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = WalOptions.parse(options)

    def schema(self) -> StructType:
        payload, _ = _payload_schema(self.opts, strict=True)
        if payload is None:
            raise ConfigError(
                "namespace has no tables yet, so there is no schema to read; write to it "
                "first or give the reader a .schema(...)", namespace=self.opts.namespace)
        return spark_schema(pa.schema(list(payload) + metadata_fields(self.opts.metadata_columns)))

    def _plan(self, schema: StructType) -> ReadPlan:
        payload, ids = _payload_schema(self.opts)
        if payload is None:  # nothing written yet: trust the user's schema
            given = [f for f in schema.fields if f.name not in METADATA_NAMES]
            payload = check_writable(StructType(given), namespace=self.opts.namespace)
        # the payload columns, then any of the metadata columns: a schema written before
        # a metadata column was added (``_row``) keeps reading what it named
        names = [f.name for f in schema.fields]
        meta = names[len(payload.names):]
        if names[:len(payload.names)] == payload.names and len(set(meta)) == len(meta) \
                and all(n in METADATA_NAMES for n in meta):
            arrow = pa.schema(list(payload) + metadata_fields(meta))
            with_meta = bool(meta)
        else:
            raise SchemaMismatch(
                f"the given schema {schema.simpleString()} does not match the table's "
                f"{spark_schema(payload).simpleString()}, then any of the metadata columns "
                f"{', '.join(METADATA_NAMES)}", namespace=self.opts.namespace)
        regions = None if self.opts.regions is None else frozenset(self.opts.regions)
        return ReadPlan(self.opts, ids, regions, read_schema(arrow), with_meta)

    def reader(self, schema: StructType) -> WalBatchReader:
        if spark_is_pushing():
            return PushdownBatchReader(self._plan(schema))
        return WalBatchReader(self._plan(schema))

    def streamReader(self, schema: StructType) -> WalStreamReader:
        return WalStreamReader(self._plan(schema))

    def writer(self, schema: StructType, overwrite: bool) -> WalBatchWriter:
        return WalBatchWriter(self.opts, self._check_write(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> WalStreamWriter:
        return WalStreamWriter(self.opts, self._check_write(schema, overwrite, stream=True))

    def _check_write(self, schema: StructType, overwrite: bool,
                     stream: bool = False) -> pa.Schema:
        """The Arrow schema the write stores; a type it could not give back is refused
        here, on the driver, before any task writes."""
        if overwrite:  # Spark's error for a write without a mode suggests Overwrite too
            mode = '.outputMode("append")' if stream else '.mode("append")'
            raise ConfigError(f"durablewal is append-only: use {mode}; a WAL never overwrites "
                              "(it keeps every committed step until retention expires it)")
        stored = check_writable(schema, namespace=self.opts.namespace)
        codec_for(self.opts.payload_format, stored)  # a type the format cannot hold
        if self.opts.event_time_column:
            check_event_time_column(stored, self.opts.event_time_column)
        return stored
