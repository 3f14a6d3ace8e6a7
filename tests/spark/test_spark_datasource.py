"""format("durablewal") in real Spark: round trips, options, errors, offsets, limits."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.wal import Cleaner
from tests.helpers import wal_config
from tests.spark.spark_io import reader, write

pytestmark = pytest.mark.spark
META = ["_region", "_table", "_sequence", "_step", "_commit_timestamp", "_row",
        "_event_time_min", "_event_time_max"]

ALL_TYPES = StructType([
    StructField("id", LongType()),
    StructField("i", IntegerType()),
    StructField("sh", ShortType()),
    StructField("by", ByteType()),
    StructField("f", FloatType()),
    StructField("d", DoubleType()),
    StructField("dec", DecimalType(20, 4)),
    StructField("s", StringType()),
    StructField("bin", BinaryType()),
    StructField("flag", BooleanType()),
    StructField("day", DateType()),
    StructField("ts", TimestampType()),
    StructField("ntz", TimestampNTZType()),
    StructField("st", StructType([StructField("a", IntegerType()), StructField("b", StringType())])),
    StructField("arr", ArrayType(IntegerType())),
    StructField("m", MapType(StringType(), IntegerType())),
    StructField("mi", MapType(IntegerType(), StringType())),
    StructField("deep", ArrayType(StructType([StructField("x", DoubleType())]))),
])


def all_types_rows(n: int) -> list[tuple]:
    rows = []
    for k in range(n):
        rows.append((
            k, k * 3, k % 100, k % 7, k / 4, k / 3, Decimal(k) / Decimal(7).quantize(Decimal("1.0000")),
            f"s{k} ünïcode", bytes([k % 256, 0, 255]), k % 2 == 0,
            dt.date(2024, 1, 1) + dt.timedelta(days=k),
            dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC) + dt.timedelta(seconds=k),
            dt.datetime(2024, 5, 1, 12, 0) + dt.timedelta(minutes=k),
            (k, f"b{k}"), [k, k + 1], {f"k{k}": k}, {k: f"v{k}"}, [(k * 1.5,)],
        ))
    rows.append((n,) + (None,) * (len(ALL_TYPES.fields) - 1))  # a row of nulls
    return rows


def json_stream(spark, tmp_path, files: int, rows: int):
    """A file stream of ``files`` JSON files (ids k*100+i), one file per micro-batch."""
    src_dir = tmp_path / "json"
    if not src_dir.exists():
        src_dir.mkdir()
        for k in range(files):
            (src_dir / f"{k:03d}.json").write_text(
                "\n".join(json.dumps({"id": k * 100 + i}) for i in range(rows)))
    return spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(src_dir))


def run_stream(df, opts: dict, checkpoint: str, **extra):
    w = df.writeStream.format("durablewal").option("checkpointLocation", checkpoint)
    for k, v in {**opts, **extra}.items():
        w = w.option(k, v)
    q = w.trigger(availableNow=True).start()
    q.awaitTermination()
    assert q.exception() is None
    return q


@pytest.mark.parametrize("payload", ["arrow", "avro"])
@pytest.mark.backends("file", "kafka-confluent", "s3")
def test_batch_round_trip_every_type(spark, wal, payload):
    """This tests that every supported Spark type, nulls included, round-trips through the WAL."""
    df = spark.createDataFrame(all_types_rows(40), ALL_TYPES)
    write(df, wal, payloadFormat=payload, table="everything")
    back = reader(spark, wal)
    assert back.columns == ALL_TYPES.names + META
    # maps cannot be sorted by Spark, so order by id rather than ignore_row_order
    assert_df_equality(back.drop(*META).orderBy("id"), df.orderBy("id"), ignore_nullable=True)
    meta = back.select("_table", "_step", "_region").distinct().collect()
    assert [tuple(r) for r in meta] == [("everything", 0, 0)]


@pytest.mark.backends("file", "kafka-confluent")
def test_stream_round_trip_regions_and_tables(spark, wal, tmp_path):
    """This tests a streaming write and read routed by regionColumn and tableColumn."""
    src = spark.range(0, 300).select(
        F.col("id"), (F.col("id") % 3).alias("r"),
        F.concat(F.lit("t"), (F.col("id") % 3).cast("string")).alias("t"),
        F.sha1(F.col("id").cast("string")).alias("h"))
    write(src.limit(0), wal, regionColumn="r", tableColumn="t")  # empty: defines nothing
    src.write.mode("overwrite").parquet(str(tmp_path / "in"))
    stream_in = spark.readStream.schema(src.schema).parquet(str(tmp_path / "in"))
    run_stream(stream_in, wal, str(tmp_path / "ckpt"), regionColumn="r", tableColumn="t")
    out_dir = str(tmp_path / "out")
    q = (reader(spark, wal, stream=True).writeStream.format("parquet")
         .option("checkpointLocation", str(tmp_path / "ckpt2")).trigger(availableNow=True)
         .start(out_dir))
    q.awaitTermination()
    got = spark.read.parquet(out_dir)
    assert sorted(got.columns) == sorted(["id", "h", *META])
    expect = src.select("id", "h", F.col("r").alias("_region"), F.col("t").alias("_table"))
    assert_df_equality(got.select("id", "h", "_region", "_table"), expect,
                       ignore_row_order=True, ignore_nullable=True)
    one = reader(spark, wal, tables="t1").select("id").collect()
    assert sorted(r.id for r in one) == list(range(1, 300, 3))
    two = reader(spark, wal, regions="2").select("_table").distinct().collect()
    assert [r._table for r in two] == ["t2"]


@pytest.mark.backends("file", "kafka-confluent")
def test_unknown_option_lists_valid_ones(spark, wal):
    """This tests that a misspelt option fails with the list of valid options."""
    with pytest.raises(PySparkException,
                       match=r"unknown option 'regoin'; did you mean 'region'\? \(valid options: path"):
        reader(spark, wal, regoin="1").collect()


@pytest.mark.parametrize("value, message", [
    ("null", r"regionColumn 'r' holds a null value"),
    ("-5", r"regionColumn 'r' holds -5"),
    ("'x'", r"regionColumn 'r' has type string"),
])
@pytest.mark.backends("file", "kafka-confluent")
def test_bad_region_values_fail_the_batch(spark, wal, value, message):
    """This tests that a null, negative or non-integer region fails with the column and value."""
    df = spark.range(3).selectExpr("id", f"if(id = 1, {value}, 0) as r")
    if value == "'x'":
        df = spark.range(3).selectExpr("id", "'x' as r")
    with pytest.raises(PySparkException, match=message):
        write(df, wal, regionColumn="r")
    assert open_namespace(wal_config(wal)).steps() == range(0, 0)


def ns_of(wal: dict):
    return open_namespace(wal_config(wal))


@pytest.mark.backends("file", "kafka-confluent")
def test_explicit_schema_that_disagrees_is_an_error(spark, wal):
    """This tests that .schema() disagreeing with the table's schema is a clear error."""
    write(spark.range(3), wal)
    with pytest.raises(PySparkException, match="does not match the table's"):
        spark.read.format("durablewal").schema("id string, other int").options(**wal).load() \
            .collect()
    payload_only = spark.read.format("durablewal").schema("id long").options(**wal).load()
    assert sorted(r.id for r in payload_only.collect()) == [0, 1, 2]


@pytest.mark.backends("file", "kafka-confluent")
def test_schema_mismatch_on_write(spark, wal):
    """This tests that writing a column of a conflicting type into a table fails, naming the
    column and both types."""
    write(spark.range(3), wal)
    with pytest.raises(PySparkException, match=r"table=default: column 'id' has type int64 in "
                                               r"the table and string in the rows"):
        write(spark.range(3).selectExpr("cast(id as string) as id"), wal)


@pytest.mark.backends("file", "kafka-confluent", "s3")
def test_stream_resumes_from_checkpoint_exactly_once(spark, wal, tmp_path):
    """This tests that a restarted source query reads new steps only: no loss, no duplicate."""
    ns = ns_of(wal)
    for k in range(3):
        write_step(ns, "app", k, {"default": [{"id": k * 10 + i} for i in range(10)]})
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run():
        q = (reader(spark, wal, stream=True, maxStepsPerTrigger="2").select("id", "_step")
             .writeStream.format("parquet").option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start(out))
        q.awaitTermination()
        return q

    first = run()
    assert [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]] == [20, 10]
    for k in range(3, 5):
        write_step(ns, "app", k, {"default": [{"id": k * 10 + i} for i in range(10)]})
    run()
    ids = sorted(r.id for r in spark.read.parquet(out).collect())
    assert ids == list(range(50))


@pytest.mark.backends("file", "kafka-confluent")
def test_admission_control_rows(spark, wal, tmp_path):
    """This tests that maxRowsPerTrigger cuts micro-batches at step boundaries."""
    ns = ns_of(wal)
    for k in range(6):
        write_step(ns, "app", k, {"default": [{"id": k * 5 + i} for i in range(5)]})
    q = (reader(spark, wal, stream=True, maxRowsPerTrigger="12").writeStream.format("noop")
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [10, 10, 10]


@pytest.mark.backends("file", "kafka-confluent")
def test_starting_and_ending_steps(spark, wal):
    """This tests startingStep (number, latest) and endingStep on batch reads."""
    ns = ns_of(wal)
    for k in range(4):
        write_step(ns, "app", k, {"default": [{"id": k}]})
    got = reader(spark, wal, startingStep="1", endingStep="3").select("id", "_step").collect()
    assert sorted(tuple(r) for r in got) == [(1, 1), (2, 2)]
    assert reader(spark, wal, startingStep="latest").count() == 0
    with pytest.raises(PySparkException, match="endingStep=9 is past the last committed step 3"):
        reader(spark, wal, endingStep="9").collect()


@pytest.mark.backends("file", "kafka-confluent")
def test_expired_steps_fail_or_skip(spark, wal):
    """This tests failOnDataLoss: an expired start fails naming the range, or is skipped."""
    ns = ns_of(wal)
    for k in range(4):
        write_step(ns, "app", k, {"default": [{"id": k}]})
    ns.expire(2)
    Cleaner(ns, grace_ms=0).run_once()
    with pytest.raises(PySparkException, match=r"available steps are \[2, 4\)"):
        reader(spark, wal, startingStep="0").collect()
    got = reader(spark, wal, startingStep="0", failOnDataLoss="false").select("id").collect()
    assert sorted(r.id for r in got) == [2, 3]


@pytest.mark.backends("file", "kafka-confluent")
def test_sink_step_per_batch_with_query_id(spark, wal, tmp_path):
    """This tests that each micro-batch becomes one step named (query id, batchId)."""
    q = run_stream(json_stream(spark, tmp_path, files=3, rows=7), wal, str(tmp_path / "ck"))
    ns = ns_of(wal)
    commits = [ns.step_commit(s) for s in ns.steps()]
    assert [(c.writer_id, c.writer_step, c.rows) for c in commits] == [
        (f"query-{q.id}", b, 7) for b in range(3)]


def test_memory_backend_is_refused_in_spark(spark, tmp_path):
    """This tests that backend=memory fails clearly instead of losing rows across workers."""
    with pytest.raises(PySparkException, match="memory backend lives inside one Python process"):
        spark.range(3).write.format("durablewal").option("backend", "memory").mode("append") \
            .save()


@pytest.mark.backends("file", "kafka-confluent", "s3")
def test_batch_replayed_after_driver_crash_adds_nothing(spark, wal, tmp_path):
    """This tests the crash between the sink's commit and Spark's commit log: the replay is a no-op."""
    ckpt = tmp_path / "ck"

    def run():
        return run_stream(json_stream(spark, tmp_path, files=3, rows=5), wal, str(ckpt))

    first = run()
    ns = ns_of(wal)
    assert ns.steps() == range(0, 3)
    written = ns.store.open_region(0).high_watermark()
    # the driver "died" after the sink committed batch 2 but before Spark logged it
    (ckpt / "commits" / "2").unlink()
    (ckpt / "commits" / ".2.crc").unlink(missing_ok=True)  # Hadoop's checksum of that file
    second = run()
    assert second.id == first.id
    assert [p["batchId"] for p in second.recentProgress if p["numInputRows"]] == [2]
    ns = ns_of(wal)
    assert ns.steps() == range(0, 3), "the replayed batch must not become a new step"
    assert ns.store.open_region(0).high_watermark() > written, "the replay wrote entries again"
    ids = sorted(read_steps(ns, "default").column("id").to_pylist())
    assert ids == sorted(k * 100 + i for k in range(3) for i in range(5))


@pytest.mark.parametrize("hold", [False, True])
def test_planning_a_micro_batch_catches_up_with_the_wal_once(tmp_path, monkeypatch, hold):
    """Spark plans every trigger with latestOffset, partitions and reportLatestOffset;
    each catch-up with the commits log costs broker round trips on Kafka, so each call
    catches up once (a holding reader that moves its hold: twice more, before and after
    appending it, so the check that a cleaner did not expire the step sees the hold).
    The plan is still the WAL as it is, a step committed after the start included."""
    from pyspark.sql.datasource import ReadAllAvailable

    from pyspark_durable.spark.datasource import DurableWalDataSource
    from pyspark_durable.wal.ledger import Ledger

    opts = {"path": str(tmp_path), "namespace": "plan", "table": "t"}
    wal = {"backend": "file", "namespace": "plan", "options": {"path": str(tmp_path)}}
    if hold:
        opts |= {"readerId": "r", "holdRetention": "true"}
    ns = open_namespace(wal)
    for step in range(3):
        write_step(ns, "w", step, {"t": [{"id": step}]})
    source = DurableWalDataSource(opts)
    stream = source.streamReader(source.schema())
    start = {**stream.initialOffset(), "step": 1}  # as after a first batch [0, 1)
    write_step(ns, "w", 3, {"t": [{"id": 3}]})  # committed after the start offset was taken

    real, calls = Ledger.refreshed, []  # every catch-up, public or the WAL's own
    monkeypatch.setattr(Ledger, "refreshed", lambda self, *args: calls.append(1) or real(self, *args))
    end = stream.latestOffset(start, ReadAllAvailable())
    assert end["step"] == 4 and len(calls) == (3 if hold else 1)
    del calls[:]
    parts = stream.partitions(start, end)
    assert [p.steps for p in parts] == [[1, 2, 3]] and len(calls) == 1
    del calls[:]
    assert stream.reportLatestOffset()["step"] == 4 and len(calls) == 1
    ns.close()
