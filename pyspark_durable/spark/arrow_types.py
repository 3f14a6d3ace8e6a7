"""Spark SQL types <-> the Arrow schema a table stores: exact, or refused by name.

The rule is fidelity, not a list: the schema a reader gets is the schema the writer
had. The writer's Spark schema (``DataSource.writer(schema, ...)``) is the truth, not
the Arrow batches Spark hands the tasks, because those lose collations. It becomes
an Arrow schema with pyspark's own conversion (``to_arrow_schema``), which marks
variant, geometry and geography by Arrow field metadata and keeps every field's Spark
metadata under ``SPARK::metadata::json``; collations, which pyspark leaves out, go into
that same metadata the way Spark's schema JSON carries them (``__COLLATIONS``). A
type pyspark's conversion narrows to its default (``interval hour to minute`` comes
back ``interval day to second``, ``time(3)`` as ``time(6)``, a user-defined type as
its SQL type) is named in full on its Arrow field, under ``durablewal::spark_type``
(a reader of a user-defined type needs its Python class, as Spark does). The WAL stores the Arrow schema with
its metadata, and the reader turns it back with pyspark's ``from_arrow_schema``,
Spark's JSON parser (``StructType.fromJson``, which reads the collations back into
the string types) and those names. The writer checks the round trip before it writes:
whatever would not come back the same is refused, naming the column.

Three things change on purpose, the same on every path:

* nullability: every column and nested field is stored and read nullable. A table
  outlives the query plan that marked a column non-null: rows of older schema
  versions and other tables read null in columns they lack.
* time zones: ``timestamp`` values are instants, stored as UTC (Spark hands the
  session zone; Spark shows them in the reader's session zone again).
* query-plan metadata (:data:`PLAN_KEYS`): ``withWatermark`` marks its column with
  ``spark.watermarkDelayMs``, a property of the writing query, not of the data. Kept,
  it would make a reader's column look watermarked with no watermark operator in its
  plan, and a stream with a watermark a conflict with a batch without one.

A type that cannot round-trip through a Python data source in pyspark 4.3 is refused
when the write is planned, before anything is written, naming its column path.

Nulls: Spark's Arrow form of a variant is ``struct<value: binary not null, metadata:
binary not null>``, of a geometry or geography ``struct<srid: int32 not null, wkb:
binary not null>``. Spark writes a null one as a null struct whose fields are null too,
which pyarrow will not cast to those non-null fields. A read gives such fields, under a
null, their type's empty value (:func:`readable`; the value stays null), so every null
Spark wrote reads back, in WALs older versions wrote too. A null in such a field of a
value that is itself present could not be read back at all: the writer refuses it
(:func:`check_readable`), a :class:`UnreadableValue` naming the column path.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import PySparkException
from pyspark.sql.pandas.types import (
    from_arrow_schema,
    from_arrow_type,
    metadata_key,
    to_arrow_schema,
)
from pyspark.sql.types import (
    ArrayType,
    CalendarIntervalType,
    DataType,
    MapType,
    StringType,
    StructField,
    StructType,
    YearMonthIntervalType,
    _parse_datatype_json_string,
)

from pyspark_durable.codec.casts import cast, offsets_from_zero
from pyspark_durable.errors import DecodeError, SchemaMismatch, UnreadableValue

TYPE_KEY = b"durablewal::spark_type"  # a leaf type pyspark's Arrow conversion narrows
PLAN_KEYS = frozenset({"spark.watermarkDelayMs"})  # Spark's EventTimeWatermark.delayKey

# Why each refused type cannot round-trip; a type not here (and not a container of
# one) round-trips exactly on every payload format.
REFUSED: dict[type[DataType], str] = {
    YearMonthIntervalType: "pyspark 4.3 cannot convert it to or from Arrow in a Python "
                           "data source (an Arrow month interval has no pyarrow array)",
    CalendarIntervalType: "Spark stores no calendar interval in any table",
}


def refused_column(schema: StructType) -> tuple[str, DataType, str] | None:
    """The first (column path, type, reason) of a type that cannot round-trip, or None."""

    def walk(dt: DataType, path: str) -> tuple[str, DataType, str] | None:
        for kind, why in REFUSED.items():
            if isinstance(dt, kind):
                return path, dt, why
        if isinstance(dt, StructType):
            return next(filter(None, (walk(f.dataType, f"{path}.{f.name}") for f in dt)),
                        None)
        if isinstance(dt, ArrayType):
            return walk(dt.elementType, f"{path}.element")
        if isinstance(dt, MapType):
            return walk(dt.keyType, f"{path}.key") or walk(dt.valueType, f"{path}.value")
        return None

    return next(filter(None, (walk(f.dataType, f.name) for f in schema)), None)


def check_writable(schema: StructType, **where: Any) -> pa.Schema:
    """The Arrow schema a write stores; a schema the WAL could not give back exactly is
    refused here, before anything is written, naming the column and its type."""
    bad = refused_column(schema)
    if bad is not None:
        path, dt, why = bad
        raise SchemaMismatch(f"column {path!r} has type {dt.simpleString()}, which durablewal "
                             f"cannot store: {why}; cast or drop the column", **where)
    fields = []
    for f in schema:
        one = StructType([f])
        try:
            stored = arrow_schema(one)
            back = spark_schema(stored)
        except PySparkException as exc:
            raise SchemaMismatch(f"column {f.name!r} has type {f.dataType.simpleString()}, "
                                 f"which has no Arrow form in pyspark: {exc}", **where) from None
        if back != nullable(one):
            raise SchemaMismatch(
                f"column {f.name!r} has type {f.dataType.simpleString()}, which would read "
                f"back as {back.fields[0].dataType.simpleString()}; durablewal refuses to "
                "change a type: cast the column", **where)
        fields.append(stored.field(0))
    return pa.schema(fields)


def nullable(dt: DataType) -> Any:
    """``dt`` as a reader sees it: every column, element, value and field nullable, no
    query-plan metadata."""
    if isinstance(dt, StructType):
        return StructType([StructField(f.name, nullable(f.dataType), True,
                                       _data_metadata(f.metadata)) for f in dt])
    if isinstance(dt, ArrayType):
        return ArrayType(nullable(dt.elementType), True)
    if isinstance(dt, MapType):
        return MapType(nullable(dt.keyType), nullable(dt.valueType), True)
    return dt


def _with_collations(field: StructField) -> StructField:
    """``field`` with its collations in its metadata, as Spark's schema JSON has them."""
    dt = field.dataType
    if isinstance(dt, StructType):
        dt = StructType([_with_collations(f) for f in dt])
    elif isinstance(dt, (ArrayType, MapType)):
        dt = _nested_structs(dt)
    meta = field.jsonValue()["metadata"]  # the field's own, plus __COLLATIONS of its type
    return StructField(field.name, dt, field.nullable, _data_metadata(meta))


def _data_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in PLAN_KEYS}


def _nested_structs(dt: DataType) -> DataType:
    if isinstance(dt, StructType):
        return StructType([_with_collations(f) for f in dt])
    if isinstance(dt, ArrayType):
        return ArrayType(_nested_structs(dt.elementType), dt.containsNull)
    if isinstance(dt, MapType):
        return MapType(_nested_structs(dt.keyType), _nested_structs(dt.valueType),
                       dt.valueContainsNull)
    return dt


def relax(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable and every timestamp zone UTC; field
    metadata (variant, geometry, Spark's) kept."""
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz="UTC")
    if pa.types.is_list(t):
        return pa.list_(_relax_field(t.value_field))
    if pa.types.is_large_list(t):
        return pa.large_list(_relax_field(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(relax(t.key_type)), _relax_field(t.item_field))
    if pa.types.is_struct(t):
        return pa.struct([_relax_field(f) for f in t])
    return t


def _relax_field(f: pa.Field) -> pa.Field:
    return pa.field(f.name, relax(f.type), nullable=True, metadata=f.metadata)


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """The stored form of a schema: nullable everywhere, zones UTC, metadata kept."""
    return pa.schema([_relax_field(f) for f in schema])


def _tag(dt: DataType, f: pa.Field) -> pa.Field:
    """``f``, the Arrow form of ``dt``, with :data:`TYPE_KEY` on each leaf whose type
    pyspark's ``from_arrow_type`` would not give back (collations have their own way)."""
    t = f.type
    if isinstance(dt, StructType):
        t = pa.struct([_tag(sf.dataType, af) for sf, af in zip(dt.fields, t, strict=True)])
    elif isinstance(dt, ArrayType):
        t = pa.list_(_tag(dt.elementType, t.value_field))
    elif isinstance(dt, MapType):
        t = pa.map_(_tag(dt.keyType, t.key_field), _tag(dt.valueType, t.item_field))
    elif not isinstance(dt, StringType) and from_arrow_type(t) != dt:
        return f.with_metadata({**(f.metadata or {}), TYPE_KEY: dt.json().encode()})
    return f.with_type(t)


def _untag(dt: DataType, f: pa.Field) -> DataType:
    """``dt`` (pyspark's reading of ``f``) with the leaf types :func:`_tag` named."""
    tag = (f.metadata or {}).get(TYPE_KEY)
    if tag is not None:
        try:
            return _parse_datatype_json_string(tag.decode())
        except (ValueError, PySparkException) as exc:
            raise DecodeError(f"column field {f.name!r}: stored Spark type {tag!r} is not "
                              f"one this pyspark knows: {exc}") from None
    t = f.type
    if isinstance(dt, StructType):
        return StructType([StructField(sf.name, _untag(sf.dataType, af), sf.nullable,
                                       sf.metadata) for sf, af in zip(dt.fields, t, strict=True)])
    if isinstance(dt, ArrayType):
        return ArrayType(_untag(dt.elementType, t.value_field), dt.containsNull)
    if isinstance(dt, MapType):
        return MapType(_untag(dt.keyType, t.key_field), _untag(dt.valueType, t.item_field),
                       dt.valueContainsNull)
    return dt


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema a table stores for a writer's Spark schema."""
    exact = StructType([_with_collations(f) for f in schema])
    arrow = to_arrow_schema(exact, timezone="UTC")
    return normalize_schema(pa.schema([_tag(sf.dataType, af)
                                       for sf, af in zip(schema.fields, arrow, strict=True)]))


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a stored Arrow schema: :func:`arrow_schema` undone."""
    base = StructType.fromJson(from_arrow_schema(schema).jsonValue())
    return StructType([StructField(sf.name, _untag(sf.dataType, af), sf.nullable, sf.metadata)
                       for sf, af in zip(base.fields, schema, strict=True)])


def read_schema(stored: pa.Schema) -> pa.Schema:
    """The Arrow schema of the batches a reader yields: Spark checks them against its
    own ``to_arrow_schema`` of the read schema, nested nullability included (a
    variant's two binaries are never null)."""
    return to_arrow_schema(spark_schema(stored), timezone="UTC")


def readable(batch: pa.RecordBatch, schema: pa.Schema, **where: Any) -> pa.RecordBatch:
    """``batch`` cast to ``schema``, a reader's: the fields ``schema`` says are never null
    given their type's empty value under a null (see the module's note on nulls); a
    null in one of them under a value that is present is :class:`UnreadableValue`."""
    old = batch.columns
    new = [_settled(c, f, None, f.name, True, where) for c, f in zip(old, schema, strict=True)]
    out = batch if all(a is b for a, b in zip(old, new, strict=True)) else \
        pa.RecordBatch.from_arrays(new, names=schema.names)
    return cast(out, schema)


def check_readable(batch: pa.RecordBatch, schema: pa.Schema, **where: Any) -> None:
    """Refuse, before it is written, a row of ``batch`` that a reader of ``schema``
    could not give back (:class:`UnreadableValue` naming the column path)."""
    for column, f in zip(batch.columns, schema, strict=True):
        _settled(column, f, None, f.name, False, where)


def _settled(arr: pa.Array, f: pa.Field, live: pa.Array | None, path: str, fill: bool,
             where: dict[str, Any]) -> pa.Array:
    """``arr``, the values of field ``f``; ``live``: where every struct around them is
    present (None: everywhere). Their nulls must be where ``f`` allows them or off
    ``live``, and with ``fill`` the latter become ``f``'s empty value. An element or a
    map entry is judged on its own: Arrow gives a null list or map no elements."""
    arr = _settled_within(arr, f.type, live, path, fill, where)
    if f.nullable or not arr.null_count:
        return arr
    nulls = arr.is_null() if live is None else pc.and_(arr.is_null(), live)
    if nulls.true_count:
        raise UnreadableValue(
            f"column {path!r} holds {nulls.true_count} null(s) inside values that are not "
            f"null, where its type ({f.type}) allows none: no reader could give those "
            "values back; write each such value whole, or as null", **where)
    return arr.fill_null(pa.scalar(_empty(arr.type), arr.type)) if fill else arr


def _settled_within(arr: pa.Array, target: pa.DataType, live: pa.Array | None, path: str,
                    fill: bool, where: dict[str, Any]) -> pa.Array:
    """``arr`` with the fields inside it settled (:func:`_settled`); itself when nothing
    in ``target`` is non-null, or nothing changed."""
    t = pa.types
    if not _has_required(target):
        return arr
    if t.is_struct(arr.type) and t.is_struct(target) and arr.type.names == target.names:
        present = arr.is_valid() if live is None else pc.and_(live, arr.is_valid())
        old = [arr.field(i) for i in range(arr.type.num_fields)]
        new = [_settled(c, tf, present, f"{path}.{tf.name}", fill, where)
               for c, tf in zip(old, target, strict=True)]
        if all(a is b for a, b in zip(old, new, strict=True)):
            return arr
        return pa.StructArray.from_arrays(new, fields=list(arr.type), mask=arr.is_null())
    lists = (t.is_list(arr.type) or t.is_large_list(arr.type)) and (
        t.is_list(target) or t.is_large_list(target))
    if not (lists or (t.is_map(arr.type) and t.is_map(target))):
        return arr
    offsets, start, size = offsets_from_zero(arr)
    if lists:
        values = arr.values.slice(start, size)
        got = _settled(values, target.value_field, None, f"{path}.element", fill, where)
        return arr if got is values else type(arr).from_arrays(
            offsets, got, type=arr.type, mask=arr.is_null())
    keys, items = arr.keys.slice(start, size), arr.items.slice(start, size)
    got_keys = _settled(keys, target.key_field, None, f"{path}.key", fill, where)
    got_items = _settled(items, target.item_field, None, f"{path}.value", fill, where)
    return arr if got_keys is keys and got_items is items else pa.MapArray.from_arrays(
        offsets, got_keys, got_items, type=arr.type, mask=arr.is_null())


def _has_required(t: pa.DataType) -> bool:
    """Whether a field inside ``t`` (a struct's, a list's element, a map's key or value)
    allows no null."""
    if pa.types.is_struct(t):
        inner = list(t)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = [t.value_field]
    elif pa.types.is_map(t):
        inner = [t.key_field, t.item_field]
    else:
        return False
    return any(not f.nullable or _has_required(f.type) for f in inner)


def _empty(t: pa.DataType) -> Any:
    """The empty value of ``t`` (zero, empty bytes, no elements): what Arrow's own builders
    put under a null."""
    if pa.types.is_struct(t):
        return {f.name: _empty(f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return []
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return b""
    if pa.types.is_fixed_size_binary(t):
        return bytes(t.byte_width)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ""
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_decimal(t):
        return Decimal(0)
    return 0  # numbers, dates, times, timestamps, durations: their integer 0


def spark_type_name(f: pa.Field) -> str:
    """A stored column's type as a Spark user knows it (``bigint``, not ``int64``;
    ``string collate UTF8_LCASE``, ``variant``)."""
    try:
        return spark_schema(pa.schema([f])).fields[0].dataType.simpleString()
    except (TypeError, ValueError):
        return str(f.type)


__all__ = ["PLAN_KEYS", "REFUSED", "TYPE_KEY", "arrow_schema", "check_readable", "check_writable",
           "metadata_key", "normalize_schema", "nullable", "read_schema", "readable",
           "refused_column", "relax", "spark_schema", "spark_type_name"]
