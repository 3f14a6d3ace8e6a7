"""Spark types <-> stored Arrow schemas, without a SparkSession: exact, or refused by name."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from pyspark_durable.errors import SchemaMismatch
from pyspark_durable.spark.arrow_types import check_writable, nullable, spark_schema
from pyspark_durable.wal.schemas import fits, merge, union_by_name

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
