"""Spark types <-> stored Arrow schemas, without a SparkSession: exact, or refused by name."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from pyspark_durable.errors import SchemaMismatch
from pyspark_durable.spark.arrow_types import check_writable, nullable, spark_schema
from pyspark_durable.wal.format.schemas import fits, merge, union_by_name

LCASE = T.StringType("UTF8_LCASE")
EXACT = [
    T.StringType(), LCASE, T.StringType("UNICODE_CI"), T.VariantType(), T.GeometryType(4326),
    T.GeometryType("ANY"), T.GeographyType(4326), T.NullType(), T.TimeType(3), T.TimeType(6),
    T.DayTimeIntervalType(T.DayTimeIntervalType.HOUR, T.DayTimeIntervalType.MINUTE),
    T.DayTimeIntervalType(), T.TimestampType(), T.TimestampNTZType(), T.DecimalType(38, 18),
    T.ArrayType(LCASE, False), T.MapType(LCASE, T.ArrayType(T.VariantType())),
    T.StructType([T.StructField("x", LCASE, False, {"comment": "inner"}),
                  T.StructField("t", T.TimeType(0))]),
]


@pytest.mark.parametrize("dt", EXACT, ids=lambda d: d.simpleString())
def test_stored_schema_gives_the_writers_type_back(dt):
    """This tests that a column's type, collations and field metadata come back from the
    stored Arrow schema exactly, with nullability relaxed."""
    may_be_null = isinstance(dt, T.NullType)  # Arrow: a null column is always nullable
    schema = T.StructType([T.StructField("c", dt, may_be_null, {"comment": "kept", "n": [1]})])
    assert spark_schema(check_writable(schema)) == nullable(schema)


@pytest.mark.parametrize("dt, words", [
    (T.YearMonthIntervalType(), "column 'c' has type interval year to month"),
    (T.ArrayType(T.YearMonthIntervalType()), "column 'c.element' has type interval year"),
    (T.MapType(T.StringType(), T.StructType([T.StructField("y", T.YearMonthIntervalType())])),
     "column 'c.value.y' has type interval year to month"),
    (T.CharType(3), "column 'c' has type char\\(3\\), which has no Arrow form"),
])
def test_types_that_cannot_round_trip_are_refused_by_name(dt, words):
    """This tests that a type durablewal cannot give back is a SchemaMismatch naming the
    column path and the type (not pyspark's untyped KeyError: 21 in a task)."""
    with pytest.raises(SchemaMismatch, match=f"namespace=ns: {words}"):
        check_writable(T.StructType([T.StructField("c", dt)]), namespace="ns")


def _stored(dt: T.DataType, name: str = "c") -> pa.Schema:
    return check_writable(T.StructType([T.StructField(name, dt)]))


def test_collation_and_variant_are_part_of_a_columns_type():
    """This tests that rows of a collated string do not silently join a plain string
    column, nor a variant a struct of binaries (merge and union name both types)."""
    plain, lcase = _stored(T.StringType()), _stored(LCASE)
    assert fits(plain, plain) and not fits(lcase, plain)
    with pytest.raises(SchemaMismatch, match="column 'c' has type string in the table and "
                                             "string \\(SPARK::metadata::json="):
        merge(plain, lcase, what="the table")
    variant = _stored(T.VariantType())
    binaries = _stored(T.StructType([T.StructField("value", T.BinaryType()),
                                     T.StructField("metadata", T.BinaryType())]))
    assert not fits(variant, binaries)
    with pytest.raises(SchemaMismatch, match="column 'c' is struct<value: binary, metadata: "
                                             "binary> in table 'a' and struct<value"):
        union_by_name([("a", binaries), ("b", variant)])


def test_widening_keeps_a_columns_metadata():
    """This tests that mergeSchema's int-to-long widening keeps the column's Spark
    metadata (its comment), so the widened column reads back with it."""
    meta = {"comment": "count"}
    narrow = check_writable(T.StructType([T.StructField("c", T.IntegerType(), True, meta)]))
    wide = check_writable(T.StructType([T.StructField("c", T.LongType(), True, meta)]))
    merged = merge(narrow, wide)
    assert spark_schema(merged) == T.StructType([T.StructField("c", T.LongType(), True, meta)])


def test_a_watermark_is_not_stored_with_its_column():
    """This tests that withWatermark's column marker (spark.watermarkDelayMs, a property
    of the writing query) is not stored: the reader's column is not marked as if it had
    a watermark, and a stream with a watermark writes into a table a batch created."""
    meta = {"spark.watermarkDelayMs": 10000, "comment": "event time"}
    marked = check_writable(T.StructType([T.StructField("ts", T.TimestampType(), True, meta)]))
    plain = check_writable(T.StructType([T.StructField("ts", T.TimestampType(), True,
                                                       {"comment": "event time"})]))
    assert spark_schema(marked)["ts"].metadata == {"comment": "event time"}
    assert fits(marked, plain)


def test_a_type_that_would_not_come_back_is_refused_by_the_rule(monkeypatch):
    """This tests that the refusal is a rule, not a list: with the Spark type of narrowed
    leaves no longer stored, time(3) (which pyspark reads back as time(6)) is refused,
    though no list names it."""
    from pyspark_durable.spark import arrow_types

    monkeypatch.setattr(arrow_types, "_tag", lambda dt, f: f)
    with pytest.raises(SchemaMismatch, match="column 't' has type time\\(3\\), which would "
                                             "read back as time\\(6\\)"):
        check_writable(T.StructType([T.StructField("t", T.TimeType(3))]))


def test_a_user_defined_type_comes_back_as_itself():
    """This tests that a UDT column (alone and in an array) is stored with its type, so a
    reader gets the UDT, not its SQL type."""
    from pyspark.testing.objects import PythonOnlyUDT

    schema = T.StructType([T.StructField("p", PythonOnlyUDT()),
                           T.StructField("ps", T.ArrayType(PythonOnlyUDT()))])
    assert spark_schema(check_writable(schema)) == nullable(schema)


# Spark types whose Arrow form has fields that are never null, in every place a null of
# them can sit; their rows below are built as Spark's Arrow writer hands them over.
NULLABLE = T.StructType([
    T.StructField("v", T.VariantType()), T.StructField("g", T.GeometryType(4326)),
    T.StructField("gg", T.GeographyType(4326)),
    T.StructField("v_items", T.ArrayType(T.VariantType())),
    T.StructField("g_values", T.MapType(T.StringType(), T.GeometryType("ANY"))),
    T.StructField("v_field", T.StructType([T.StructField("v", T.VariantType(), False)])),
    T.StructField("strict", T.StructType([T.StructField("x", T.IntegerType(), False)])),
    T.StructField("voids", T.ArrayType(T.NullType())),
])
VARIANT = {"value": b"\x0c\x01", "metadata": b"\x01\x00\x00"}
POINT = {"srid": 4326, "wkb": b"\x01\x01\x00\x00\x00"}


def _as_spark_writes(t: pa.DataType, rows: list) -> pa.StructArray:
    """A struct array as Spark's Arrow writer makes it: a null row's fields null too."""
    fields = [pa.array([None if r is None else r[f.name] for r in rows], f.type) for f in t]
    return pa.StructArray.from_arrays(fields, fields=list(t),
                                      mask=pa.array([r is None for r in rows]))


def _spark_batch(stored: pa.Schema, v: list | None = None) -> pa.RecordBatch:
    """Three rows of :data:`NULLABLE` holding a null at every level (row 0 the columns'
    own nulls), as the stored schema; ``v``: the variant column's rows instead."""
    t = {f.name: f.type for f in stored}
    columns = {
        "v": _as_spark_writes(t["v"], v or [None, VARIANT, None]),
        "g": _as_spark_writes(t["g"], [None, POINT, None]),
        "gg": _as_spark_writes(t["gg"], [None, None, POINT]),
        "v_items": pa.ListArray.from_arrays(
            pa.array([0, 0, 2, 3], pa.int32()),
            _as_spark_writes(t["v_items"].value_type, [VARIANT, None, None]),
            type=t["v_items"], mask=pa.array([True, False, False])),
        "g_values": pa.MapArray.from_arrays(
            pa.array([0, 0, 2, 2], pa.int32()), pa.array(["a", "b"]),
            _as_spark_writes(t["g_values"].item_type, [None, POINT]), type=t["g_values"],
            mask=pa.array([True, False, False])),
        "v_field": pa.StructArray.from_arrays(
            [_as_spark_writes(t["v_field"].field(0).type, [None, None, VARIANT])],
            fields=list(t["v_field"]), mask=pa.array([True, False, False])),
        "strict": pa.StructArray.from_arrays([pa.array([None, 7, None], pa.int32())],
                                             fields=list(t["strict"]),
                                             mask=pa.array([True, False, True])),
        "voids": pa.array([None, [None, None], []], t["voids"]),
    }
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=stored)


@pytest.mark.parametrize("fmt", ["arrow", "avro"])
def test_every_null_reads_back_in_the_readers_arrow_form(fmt):
    """This tests that a null variant, geometry or geography (a null struct of null
    fields, as Spark writes it), one as an array's element, a map's value or a struct's
    field, a null struct whose field is not nullable and an array of void, decoded from
    either payload format, read back in the Arrow form Spark's reader checks (fields of
    a variant or geometry never null), with every value as written. The arrow payload
    is the bytes an older version wrote too: its encoding did not change."""
    from pyspark_durable.codec import codec_for
    from pyspark_durable.spark.arrow_types import check_readable, read_schema, readable

    stored = check_writable(NULLABLE)
    batch, readers = _spark_batch(stored), read_schema(stored)
    check_readable(batch, readers)  # nothing to refuse: every null is a whole value's
    codec = codec_for(fmt, stored)
    (decoded,) = codec.decode(codec.encode(batch))
    if fmt == "arrow":  # what every read of a null variant failed with
        with pytest.raises(pa.ArrowInvalid, match="field 'value' of type binary has nulls"):
            decoded.cast(readers)
    got = readable(decoded, readers)
    got.validate(full=True)
    assert got.schema.equals(readers)
    assert got.to_pylist() == batch.to_pylist()
    assert got.column("v").to_pylist() == [None, VARIANT, None]
    assert got.column("v_items").to_pylist() == [None, [VARIANT, None], [None]]


@pytest.mark.parametrize("column, rows, path", [
    ("v", [{"value": None, "metadata": b"\x01\x00\x00"}, None, None], "v.value"),
    ("v_items", None, "v_items.element.metadata"),
    ("g_values", None, "g_values.value.srid"),
])
def test_a_value_no_reader_could_give_back_is_refused_by_name(column, rows, path):
    """This tests that a null inside a variant or geometry that is itself present (no
    reader could give it back) is an UnreadableValue naming the column path, before a
    write, and the same at a read of one already stored."""
    from pyspark_durable.errors import UnreadableValue
    from pyspark_durable.spark.arrow_types import check_readable, read_schema, readable

    stored = check_writable(NULLABLE)
    batch = _spark_batch(stored, rows)
    if column == "v_items":  # the element that is present loses its metadata
        items = batch.column(column)
        broken = _as_spark_writes(items.type.value_type,
                                  [{"value": b"\x0c\x01", "metadata": None}, None, None])
        batch = batch.set_column(3, column, pa.ListArray.from_arrays(
            items.offsets, broken, type=items.type, mask=items.is_null()))
    if column == "g_values":  # the geometry present under 'b' loses its srid
        values = batch.column(column)
        broken = _as_spark_writes(values.type.item_type, [None, {"srid": None, "wkb": b"\x01"}])
        batch = batch.set_column(4, column, pa.MapArray.from_arrays(
            values.offsets, values.keys, broken, type=values.type, mask=values.is_null()))
    words = f"namespace=ns table=t: column '{path}' holds 1 null\\(s\\) inside values that " \
            "are not null"
    with pytest.raises(UnreadableValue, match=words):
        check_readable(batch, read_schema(stored), namespace="ns", table="t")
    with pytest.raises(UnreadableValue, match=words):
        readable(batch, read_schema(stored), namespace="ns", table="t")


def test_the_sink_refuses_an_unreadable_value_before_writing_anything(tmp_path):
    """This tests that a Spark task's write (``write_batches``, without Spark) of a row
    no reader could give back fails with UnreadableValue, and leaves no table and no
    entry behind (the batch is checked before it is encoded; entries of earlier batches
    of a failed task are never committed, so never read)."""
    from pyspark_durable.errors import UnreadableValue
    from pyspark_durable.spark.options import WalOptions
    from pyspark_durable.spark.session_cache import namespace_for
    from pyspark_durable.spark.sink import write_batches

    stored = check_writable(NULLABLE)
    bad = _spark_batch(stored, [VARIANT, {"value": b"\x0c\x01", "metadata": None}, None])
    opts = WalOptions.parse({"path": str(tmp_path / "wal"), "namespace": "sink",
                             "table": "t"})
    with pytest.raises(UnreadableValue, match=r"namespace=sink table=t: column 'v\.metadata'"):
        write_batches(opts, iter([bad]), "query", 0, "a0", stored)
    ns = namespace_for(opts)
    assert ns.tables.by_id() == {} and ns.store.list_regions() == []
