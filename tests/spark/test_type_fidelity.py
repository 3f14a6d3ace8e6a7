"""Exact type fidelity: the schema and values a reader gets are the writer's, for every
Spark SQL type pyspark knows, on both payload formats, or the write is refused by name.

The list of types comes from pyspark itself (every ``DataType`` subclass in
``pyspark.sql.types``): a type Spark adds fails :func:`test_every_spark_type_is_classified`
until it is placed in ROUND_TRIP or REFUSED below and covered by a column here.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyspark.sql.types as T
import pytest
from pyspark.errors import PySparkException
from pyspark.testing.objects import PythonOnlyPoint, PythonOnlyUDT

from pyspark_durable.codec.casts import cast  # pyarrow casts array<void> wrongly
from pyspark_durable.endpoint import open_namespace
from pyspark_durable.spark.arrow_types import nullable
from tests.spark.spark_io import reader, write

pytestmark = pytest.mark.spark
FORMATS = ("arrow", "avro")
WEST = "America/Los_Angeles"  # a session zone west of UTC: the 9999-12-31 edge overflows

# Each concrete type: the columns (name, SQL expression) that carry it in the test.
ROUND_TRIP: dict[type, list[tuple[str, str]]] = {
    T.NullType: [("n", "null")],
    T.BooleanType: [("b", "true")],
    T.ByteType: [("i8", "cast(-128 as tinyint)")],
    T.ShortType: [("i16", "cast(32767 as smallint)")],
    T.IntegerType: [("i32", "-2147483648")],
    T.LongType: [("i64", "-9223372036854775807L - 1")],
    T.FloatType: [("f32", "cast('NaN' as float)")],
    T.DoubleType: [("f64", "cast('-Infinity' as double)"), ("f64z", "-0.0d")],
    T.DecimalType: [("dec", "cast('12345678901234567890.123456789012345678' as decimal(38,18))")],
    T.StringType: [("s", "'grüße'"), ("s_lcase", "'AbC' collate UTF8_LCASE"),
                   ("s_ci", "named_struct('x', 'a' collate UNICODE_CI)")],
    # Spark hands a data source no char/varchar column: the DataFrame's type is string
    T.CharType: [("ch", "cast('a' as char(3))")],
    T.VarcharType: [("vc", "cast('a' as varchar(3))")],
    T.BinaryType: [("bin", "X'00FF'")],
    T.DateType: [("d_min", "date'0001-01-01'"), ("d_max", "date'9999-12-31'")],
    T.TimestampType: [("ts_max", "timestamp'9999-12-31 23:59:59.999999'"),
                      ("ts_min", "timestamp'0001-01-01 00:00:00'")],
    T.TimestampNTZType: [("ntz", "timestamp_ntz'9999-12-31 23:59:59.999999'")],
    T.DayTimeIntervalType: [("dt_ds", "interval '1 02:03:04.000005' day to second"),
                            ("dt_hm", "interval '02:03' hour to minute"),
                            ("dt_d", "interval '5' day")],
    T.TimeType: [("t3", "cast('12:34:56.789' as time(3))"), ("t6", "time'23:59:59.999999'")],
    T.VariantType: [("v", "parse_json('{\"a\": [1, 2.5, \"x\", null]}')")],
    T.GeometryType: [("g", "st_geomfromwkb(X'0101000000000000000000F03F0000000000000040')")],
    T.GeographyType: [("gg", "st_geogfromwkb(X'0101000000000000000000F03F0000000000000040')")],
    T.ArrayType: [("arr", "array(1, null, 3)"), ("arr_v", "array(parse_json('1'))")],
    T.MapType: [("m", "map('k' collate UTF8_LCASE, named_struct('x', interval '1' hour))")],
    # a.b and a_b are both structs: Avro record names must not clash
    T.StructType: [("a", "named_struct('b', named_struct('x', 1))"),
                   ("a_b", "named_struct('x', 2)")],
    T.UserDefinedType: [("udt", None), ("udt_arr", None)],  # no SQL: see columns_df
}
# Each refused type: a column carrying it and the words the error must hold.
REFUSED: dict[type, tuple[str, str, str]] = {
    T.YearMonthIntervalType: ("ym", "array(interval '1-2' year to month)",
                              "column 'ym.element' has type interval year to month"),
    T.CalendarIntervalType: ("ci", "make_interval(1, 2, 3, 4, 5, 6, 7)",
                             'Cannot use "INTERVAL" type'),  # Spark's own analysis refuses
}
NOT_COLUMN_TYPES = {T.DataType, T.AtomicType, T.NumericType, T.IntegralType, T.FractionalType,
                    T.DatetimeType, T.AnyTimeType, T.SpatialType, T.AnsiIntervalType,
                    T.StructField}  # abstract bases, and a struct's field


def spark_types() -> set[type]:
    """Every DataType class pyspark.sql.types defines."""
    found, todo = set(), [T.DataType]
    while todo:
        cls = todo.pop()
        if cls.__module__ == T.__name__ and cls not in found:
            found.add(cls)
            todo.extend(cls.__subclasses__())
    return found


def test_every_spark_type_is_classified():
    """This tests that every Spark SQL type pyspark defines either round-trips (and has a
    column below) or is refused by name: a new type fails here until it is handled."""
    unknown = spark_types() - NOT_COLUMN_TYPES - set(ROUND_TRIP) - set(REFUSED)
    assert not unknown, f"unhandled Spark types: {sorted(c.__name__ for c in unknown)}"
    assert not set(ROUND_TRIP) & set(REFUSED)


def _ints(t: pa.DataType) -> pa.DataType:
    """``t`` with dates, timestamps, durations and times as their integers: Python's
    ``datetime`` cannot hold every Spark timestamp (year 9999 in a zone west of UTC)."""
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_time64(t):
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_ints(t.value_type)).with_nullable(True))
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_ints(t.key_type)),
                       t.item_field.with_type(_ints(t.item_type)).with_nullable(True))
    if pa.types.is_struct(t):  # nullable: Spark's null variant has null "non-null" fields
        return pa.struct([f.with_type(_ints(f.type)).with_nullable(True) for f in t])
    return t


def _exact(value):
    """A value as something == compares exactly (NaN equal to NaN, -0.0 apart from 0.0)."""
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    return value


def arrow_of(df) -> pa.Table:
    """``df``'s rows as Spark sends them in Arrow. Not ``DataFrame.toArrow``: pyspark 4.3
    casts its result to the non-null fields of a variant or geometry, which fails on a
    null one (the batches hold it as a null struct of null fields)."""
    return pa.Table.from_batches(df._collect_as_arrow(empty_list_if_zero_records=False))


def rows_of(tables: list[pa.Table]) -> list[dict]:
    """Rows of Spark's Arrow results (:func:`arrow_of`), exactly comparable, in an order
    fixed by their content (a write of several tasks may commit them in any order)."""
    rows = []
    for table in tables:
        ints = cast(table, pa.schema([f.with_type(_ints(f.type)) for f in table.schema]))
        rows += [_exact(r) for r in ints.to_pylist()]
    return sorted(rows, key=repr)


@pytest.fixture
def west(spark) -> Iterator[None]:
    """The session in a zone west of UTC, with Spark's TIME type on, for one test."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", WEST)
    spark.conf.set("spark.sql.timeType.enabled", "true")
    yield
    spark.conf.set("spark.sql.session.timeZone", zone)
    spark.conf.unset("spark.sql.timeType.enabled")


def columns_df(spark, types: list[type] | None = None):
    cols = [c for cls, cs in ROUND_TRIP.items() if types is None or cls in types for c in cs]
    df = spark.sql("select " + ", ".join(f"{expr} as {name}" for name, expr in cols if expr))
    if types is None or T.UserDefinedType in types:
        udt = T.StructType([T.StructField("udt", PythonOnlyUDT()),
                            T.StructField("udt_arr", T.ArrayType(PythonOnlyUDT()))])
        df = df.crossJoin(spark.createDataFrame(
            [(PythonOnlyPoint(1.0, 2.0), [PythonOnlyPoint(3.0, -0.0), None])], udt))
    return df.withMetadata("i32", {"comment": "kept", "nested": {"k": [1, 2]}}) \
        if "i32" in df.columns else df


# Each column of ROUND_TRIP again, holding a null at each level: the column's own (row 0),
# a struct's field, an array's element, a map's value, and a null struct whose field is
# not nullable (a literal is never null); a suffix with "__" clashes with no name.
NULLS = {"": "if(id = 0, null, {e})", "__field": "named_struct('x', if(id = 0, null, {e}))",
         "__element": "array({e}, null)", "__value": "map('k', {e}, 'n', null)",
         "__strict": "if(id = 0, null, named_struct('x', {e}))"}


def nulls_df(spark):
    """Two rows holding every round-trip type, with a null of it at every level."""
    cols = [(n, e) for cs in ROUND_TRIP.values() for n, e in cs if e]
    df = spark.sql("select id, " + ", ".join(f"{how.format(e=expr)} as {name}{suffix}"
                                             for name, expr in cols
                                             for suffix, how in NULLS.items())
                   + " from range(0, 2, 1, 1)")
    point, udt = PythonOnlyPoint(1.0, -0.0), PythonOnlyUDT()
    udts = T.StructType([
        T.StructField("id", T.LongType()), T.StructField("udt", udt),
        T.StructField("udt__field", T.StructType([T.StructField("x", udt)])),
        T.StructField("udt__element", T.ArrayType(udt)),
        T.StructField("udt__value", T.MapType(T.StringType(), udt)),
        T.StructField("udt__strict", T.StructType([T.StructField("x", udt, False)]))])
    rows = [(0, None, (None,), [point, None], {"k": point, "n": None}, None),
            (1, point, (point,), [point, None], {"k": point, "n": None}, (point,))]
    return df.join(spark.createDataFrame(rows, udts), "id")


def stream_rows(spark, opts: dict, table: str, names: list[str]) -> tuple[T.StructType, list]:
    """The schema and rows an availableNow stream reads."""
    got: list = []
    df = reader(spark, opts, stream=True, tables=table)
    query = (df.select(*names).writeStream
             .foreachBatch(lambda batch, _id: got.append(arrow_of(batch)))
             .option("checkpointLocation", f"/tmp/tf-ckpt-{uuid.uuid4().hex}")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return df.select(*names).schema, rows_of(got)


def check_round_trip(spark, opts: dict, formats: tuple[str, ...], df) -> None:
    want_schema, want_rows = nullable(df.schema), rows_of([arrow_of(df)])
    for fmt in formats:
        write(df, opts, table=fmt, payloadFormat=fmt)
    for fmt in formats:
        batch = reader(spark, opts, tables=fmt).select(*df.columns)
        assert batch.schema == want_schema, fmt
        assert rows_of([arrow_of(batch)]) == want_rows, fmt
        schema, rows = stream_rows(spark, opts, fmt, df.columns)
        assert schema == want_schema, fmt
        assert rows == want_rows, fmt


def test_every_type_round_trips_exactly_on_both_formats(spark, west, tmp_path):
    """This tests that a DataFrame holding every round-trip type (collations, variant,
    geometry, narrow intervals, time(3), field metadata, timestamps at year 9999 in a zone
    west of UTC, structs a.b beside a_b, user-defined types) reads back, batch and stream, with the writer's
    schema (nullable) and values, on the arrow and avro payload formats."""
    check_round_trip(spark, {"namespace": "types", "path": str(tmp_path / "wal")}, FORMATS,
                     columns_df(spark))


def test_nulls_of_every_type_round_trip_at_every_level(spark, west, tmp_path):
    """This tests that a null of every round-trip type (variant and geometry included),
    as a column's value, a struct's field, an array's element, a map's value and a null
    struct whose field is not nullable, beside values of the same columns, reads back,
    batch and stream, with the writer's schema (nullable) and values, on the arrow and
    avro payload formats (a null variant once committed, then failed every read)."""
    df = nulls_df(spark)
    assert df.schema["v__strict"].dataType["x"].nullable is False  # what the case is about
    assert df.schema["g__strict"].dataType["x"].nullable is False
    check_round_trip(spark, {"namespace": "nulls", "path": str(tmp_path / "wal")}, FORMATS, df)


@pytest.mark.kafka
def test_types_round_trip_on_kafka(spark, west, kafka_broker):
    """This tests that the Kafka backend stores the same exact types (the path is the
    backend's bytes: a subset of types, both payload formats)."""
    opts = {"namespace": f"t{uuid.uuid4().hex[:10]}", "backend": "kafka",
            "kafka.bootstrap.servers": kafka_broker}
    check_round_trip(spark, opts, FORMATS, columns_df(spark, [
        T.StringType, T.VariantType, T.TimestampType, T.DayTimeIntervalType, T.StructType,
        T.MapType]))


@pytest.mark.parametrize("cls", list(REFUSED), ids=lambda c: c.__name__)
@pytest.mark.parametrize("fmt", FORMATS)
def test_refused_types_are_named_and_nothing_is_written(spark, tmp_path, cls, fmt):
    """This tests that a type durablewal cannot give back is refused before anything is
    written, with an error naming the column and the type."""
    name, expr, words = REFUSED[cls]
    df = spark.sql(f"select 1L as id, {expr} as {name}")
    opts = {"namespace": "refused", "path": str(tmp_path / "wal")}
    with pytest.raises(PySparkException, match=words) as caught:
        write(df, opts, payloadFormat=fmt)
    if cls is not T.CalendarIntervalType:
        assert "SchemaMismatch" in str(caught.value)
    write(spark.sql("select 1L as id"), opts, table="other")  # the namespace works...
    ns = open_namespace({"backend": "file", "namespace": "refused",
                         "options": {"path": opts["path"]}})
    assert ns.steps() == range(0, 1)  # ...and holds that one step only


def test_a_readers_own_schema_with_a_refused_type_is_named(spark, tmp_path):
    """This tests that a reader's own schema for a table not written yet is checked by
    the same rule: a type the WAL cannot give back is a SchemaMismatch naming it."""
    opts = {"namespace": "ahead", "path": str(tmp_path / "wal")}
    write(spark.sql("select 1L as id"), opts, table="now")
    with pytest.raises(PySparkException, match="SchemaMismatch: namespace=ahead: column 'ym' "
                                               "has type interval year to month"):
        (spark.read.format("durablewal").schema("id long, ym interval year to month")
         .options(**opts).option("tables", "later").load().collect())
