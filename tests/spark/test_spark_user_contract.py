"""The user's contract of format("durablewal"): tables over regions, union by name,
mergeSchema, Spark's own options, and reads that never create anything."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from pyspark_durable.endpoint import open_namespace
from pyspark_durable.errors import LogNotFound
from tests.helpers import wal_config
from tests.spark.spark_io import reader, write

pytestmark = [pytest.mark.spark, pytest.mark.backends("file", "kafka-confluent")]
META = ["_region", "_table", "_sequence", "_step", "_commit_timestamp", "_row",
        "_event_time_min", "_event_time_max"]


# -- helpers -------------------------------------------------------------------------

def json_dir(folder: Path, files: list[list[dict]]) -> str:
    """One JSON file per list of rows (one micro-batch each with maxFilesPerTrigger=1)."""
    folder.mkdir(parents=True)
    for k, rows in enumerate(files):
        (folder / f"{k:03d}.json").write_text("\n".join(json.dumps(r) for r in rows))
    return str(folder)


def json_stream(spark, folder: str, schema: str):
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(folder)


def start_write(df, opts: dict, checkpoint: str, name: str | None = None, **extra):
    w = df.writeStream.format("durablewal").option("checkpointLocation", checkpoint)
    if name is not None:
        w = w.queryName(name)
    for k, v in {**opts, **extra}.items():
        w = w.option(k, v)
    return w.trigger(availableNow=True).start()


def run_write(df, opts: dict, checkpoint: str, name: str | None = None, **extra):
    q = start_write(df, opts, checkpoint, name, **extra)
    q.awaitTermination()
    assert q.exception() is None
    return q


def stream_to_parquet(spark, opts: dict, tmp_path: Path, tag: str, **extra):
    """Everything a streaming read of ``opts`` sees, through a parquet sink."""
    out, ckpt = tmp_path / f"{tag}_out", tmp_path / f"{tag}_ckpt"
    q = (reader(spark, opts, stream=True, **extra).writeStream.format("parquet")
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start(str(out)))
    q.awaitTermination()
    assert q.exception() is None
    return spark.read.parquet(str(out))


def rows_of(df, *cols: str) -> list[tuple]:
    return sorted((tuple(r) for r in df.select(*cols).collect()), key=repr)


def endpoint(wal: dict) -> dict:
    return {**wal_config(wal), "namespace_id": None}


def steps_of(wal: dict) -> range:
    ns = open_namespace(endpoint(wal), create=False)
    try:
        return ns.steps()
    finally:
        ns.close()


def assert_dense_sequences(df) -> dict:
    """Per (_region, _table) the distinct sequences are 0..k-1; returns the groups' k."""
    seqs: dict[tuple, set[int]] = defaultdict(set)
    for r in df.select("_region", "_table", "_sequence").distinct().collect():
        seqs[(r._region, r._table)].add(r._sequence)
    for key, got in seqs.items():
        assert got == set(range(max(got) + 1)), f"sequences of {key} are not dense: {sorted(got)}"
    return {k: len(v) for k, v in seqs.items()}


def tree(root: Path) -> list[tuple[str, int | None]]:
    """Every file and folder below ``root`` with file sizes (not mtimes)."""
    return sorted((str(p.relative_to(root)), None if p.is_dir() else p.stat().st_size)
                  for p in root.rglob("*"))


def topics(wal: dict) -> set[str] | None:
    if wal.get("backend") != "kafka":
        return None
    admin = KafkaAdminClient(bootstrap_servers=wal["kafka.bootstrap.servers"])
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def error_of(fn) -> str:
    with pytest.raises(PySparkException) as info:
        fn()
    return str(info.value)


# -- tests ---------------------------------------------------------------------------

def test_region_column_alone_shards_the_default_table(spark, wal, tmp_path):
    """This tests that regionColumn alone (batch and streaming writes) shards the table
    "default" over regions: every id once, _region = id % 3, dense sequences per
    (region, table), the region column not stored, and a streaming read sees the same."""
    batch = spark.range(300).select("id", (F.col("id") % 3).alias("r"))
    write(batch, wal, regionColumn="r")
    folder = json_dir(tmp_path / "json", [[{"id": 1000 + k * 50 + i} for i in range(50)]
                                          for k in range(2)])
    stream = json_stream(spark, folder, "id long").withColumn("r", F.col("id") % 3)
    run_write(stream, wal, str(tmp_path / "ckpt"), regionColumn="r")

    expect_ids = list(range(300)) + list(range(1000, 1100))
    back = reader(spark, wal)
    assert back.columns == ["id", *META]
    got = rows_of(back, "id", "_region", "_table")
    assert sorted(r[0] for r in got) == expect_ids
    assert all(region == i % 3 and table == "default" for i, region, table in got)
    counts = assert_dense_sequences(back)
    assert set(counts) == {(0, "default"), (1, "default"), (2, "default")}
    assert steps_of(wal) == range(0, 3)

    streamed = stream_to_parquet(spark, wal, tmp_path, "read")
    cols = ["id", "_region", "_table", "_sequence", "_step"]
    assert rows_of(streamed, *cols) == rows_of(back, *cols)


def test_named_queries_write_and_read(spark, wal, tmp_path):
    """This tests that .queryName() on a durablewal sink and on a durablewal source is
    accepted (as are checkpointLocation and path given as options), rows exact."""
    folder = json_dir(tmp_path / "json", [[{"id": k * 100 + i} for i in range(20)]
                                          for k in range(2)])
    q = run_write(json_stream(spark, folder, "id long"), wal, str(tmp_path / "wck"),
                  name="orders_writer")
    assert q.name == "orders_writer"
    expect = sorted(k * 100 + i for k in range(2) for i in range(20))

    r = (reader(spark, wal, stream=True).writeStream.format("memory").queryName("orders_reader")
         .option("checkpointLocation", str(tmp_path / "rck")).trigger(availableNow=True).start())
    r.awaitTermination()
    assert r.exception() is None and r.name == "orders_reader"
    assert sorted(x.id for x in spark.table("orders_reader").select("id").collect()) == expect

    # Spark's own options reach the source as plain options too: accepted, ignored
    batch = reader(spark, wal, checkpointLocation=str(tmp_path / "unused"), queryName="q")
    assert sorted(x.id for x in batch.select("id").collect()) == expect
    assert not (tmp_path / "unused").exists()


def test_tables_of_different_schemas_read_as_one_union(spark, wal, tmp_path):
    """This tests that a namespace whose tables have different schemas reads (batch and
    streaming) as one DataFrame with the union of the columns by name, nulls where a
    table lacks a column, int widened to long and float to double."""
    write(spark.createDataFrame([(1, "x1"), (2, "x2")], "id long, x string"), wal, table="a")
    write(spark.createDataFrame([(3, 0.5), (4, 1.25)], "id long, y double"), wal, table="b")
    write(spark.createDataFrame([(5,), (6,)], "id int"), wal, table="c")
    write(spark.createDataFrame([(7, 2.5)], "id int, y float"), wal, table="d")
    expect = [(1, "x1", None, "a"), (2, "x2", None, "a"), (3, None, 0.5, "b"),
              (4, None, 1.25, "b"), (5, None, None, "c"), (6, None, None, "c"),
              (7, None, 2.5, "d")]

    back = reader(spark, wal)
    assert sorted(back.columns) == sorted(["id", "x", "y", *META])
    types = dict(back.dtypes)
    assert (types["id"], types["x"], types["y"]) == ("bigint", "string", "double")
    assert rows_of(back, "id", "x", "y", "_table") == sorted(expect, key=repr)

    streamed = stream_to_parquet(spark, wal, tmp_path, "s")
    assert dict(streamed.dtypes)["id"] == "bigint"
    assert rows_of(streamed, "id", "x", "y", "_table") == sorted(expect, key=repr)

    only_c = reader(spark, wal, tables="c")
    assert only_c.columns == ["id", *META] and dict(only_c.dtypes)["id"] == "int"


@pytest.mark.backends(("file", "arrow"), ("kafka-confluent", "arrow"), ("file", "avro"),
                      paired_with="payload")
def test_merge_schema_mid_stream(spark, wal, payload, tmp_path):
    """This tests schema evolution of a streamed table: new columns or a widened int
    fail without mergeSchema (naming it, adding no step); with mergeSchema=true they add
    a schema version, old steps read the new column as null, and rows lacking a column
    are written with null there."""
    first = json_dir(tmp_path / "in1", [[{"id": k * 10 + i, "n": i} for i in range(5)]
                                        for k in range(2)])
    run_write(json_stream(spark, first, "id long, n int"), wal, str(tmp_path / "c1"),
              payloadFormat=payload)
    assert steps_of(wal) == range(0, 2)

    second = json_dir(tmp_path / "in2", [
        [{"id": 100 + k * 10 + i, "n": 2**40 + i, "extra": f"e{k}{i}"} for i in range(5)]
        for k in range(2)])
    new_rows = json_stream(spark, second, "id long, n long, extra string")
    failing = start_write(new_rows, wal, str(tmp_path / "c2"), payloadFormat=payload)
    message = error_of(failing.awaitTermination)
    assert "mergeSchema" in message
    assert steps_of(wal) == range(0, 2), "a failed write must not add a step"
    assert reader(spark, wal).count() == 10
    with pytest.raises(PySparkException, match="mergeSchema"):  # batch too
        write(spark.createDataFrame([(1, "z")], "id long, extra string"), wal,
              payloadFormat=payload)
    assert steps_of(wal) == range(0, 2)

    run_write(new_rows, wal, str(tmp_path / "c3"), payloadFormat=payload, mergeSchema="true")
    assert steps_of(wal) == range(0, 4)
    # rows without `extra`, and with an int `n`, fit the evolved table as they are
    write(spark.createDataFrame([(500, 7), (501, None)], "id long, n int"), wal,
          payloadFormat=payload)
    write(spark.createDataFrame([(600,)], "id long"), wal, payloadFormat=payload)

    back = reader(spark, wal)
    assert back.columns == ["id", "n", "extra", *META]
    assert [t for _, t in back.dtypes[:3]] == ["bigint", "bigint", "string"]
    # (a file stream may take its files in any order: steps per query, not per file)
    expect = ([(k * 10 + i, i, None, (0, 1)) for k in range(2) for i in range(5)]
              + [(100 + k * 10 + i, 2**40 + i, f"e{k}{i}", (2, 3)) for k in range(2)
                 for i in range(5)]
              + [(500, 7, None, (4,)), (501, None, None, (4,)), (600, None, None, (5,))])
    got = rows_of(back, "id", "n", "extra", "_step")
    assert [r[:3] for r in got] == sorted((e[:3] for e in expect), key=repr)
    steps = {e[0]: e[3] for e in expect}
    assert all(step in steps[i] for i, _, _, step in got)
    assert_dense_sequences(back)

    old = reader(spark, wal, endingStep="2")  # old steps only: read as the newest schema
    assert old.columns == back.columns
    assert {r.extra for r in old.select("extra").collect()} == {None}


def test_conflicting_column_type_across_tables(spark, wal, tmp_path):
    """This tests that a column of different, non-widenable types in two tables fails a
    whole read (batch and streaming) naming both tables, the column and both types and
    suggesting option tables, and that reading either table alone works."""
    write(spark.createDataFrame([(1, "one")], "id long, v string"), wal, table="a")
    write(spark.createDataFrame([(2, 22)], "id long, v long"), wal, table="b")

    for stream in (False, True):
        message = error_of(lambda s=stream: reader(spark, wal, stream=s))
        assert "SchemaMismatch" in message
        assert "column 'v' is string in table 'a' and bigint in table 'b'" in message
        assert '.option("tables", "a")' in message

    a = reader(spark, wal, tables="a")
    assert dict(a.dtypes)["v"] == "string"
    assert rows_of(a, "id", "v", "_table") == [(1, "one", "a")]
    b = reader(spark, wal, tables="b")
    assert dict(b.dtypes)["v"] == "bigint"
    assert rows_of(b, "id", "v", "_table") == [(2, 22, "b")]
    streamed = stream_to_parquet(spark, wal, tmp_path, "b", tables="b")
    assert rows_of(streamed, "id", "v", "_table") == [(2, 22, "b")]


def test_reads_of_unknown_things_create_nothing(spark, wal, tmp_path):
    """This tests that batch and streaming reads of an unknown namespace, a missing path,
    an unknown region or table fail with what exists and leave the file tree (and the
    Kafka broker's topics) exactly as they were."""
    ns = wal["namespace"]
    write(spark.range(30).select("id", (F.col("id") % 3).alias("r")), wal, regionColumn="r")
    tree_before, topics_before = tree(tmp_path), topics(wal)
    missing = "nope" if topics_before is None else f"nope{ns}"
    gone = {**wal, "namespace": missing}

    for stream in (False, True):
        message = error_of(lambda s=stream: reader(spark, gone, stream=s).collect())
        listed = re.search(rf"unknown namespace '{missing}': pick one with "
                           r'\.option\("namespace", NAME\); namespaces in .*?: ([^\n]*)', message)
        assert listed, message
        if topics_before is None:
            assert listed.group(1) == ns
        else:  # the broker holds other tests' namespaces too
            assert ns in listed.group(1).split(", ")

    message = error_of(lambda: reader(spark, wal, regions="99"))
    assert "no region 99 in the namespace; regions with data: 0, 1, 2" in message
    message = error_of(lambda: reader(spark, wal, tables="x"))
    assert "unknown table 'x'; tables: default" in message

    if topics_before is None:  # a path that does not exist stays absent
        absent = tmp_path / "absent" / "wal"
        for stream in (False, True):
            message = error_of(lambda s=stream: (spark.readStream if s else spark.read)
                               .format("durablewal").option("namespace", ns).load(str(absent)))
            assert f"unknown namespace '{ns}': folder {absent} (which does not exist) holds " \
                   "no namespace" in message
            assert not (tmp_path / "absent").exists()
    assert tree(tmp_path) == tree_before
    after = topics(wal)
    assert after == topics_before
    assert after is None or not [t for t in after if t.startswith(missing)]


def test_unknown_option_suggests_the_closest(spark, wal, tmp_path):
    """This tests that a misspelt option on a batch or streaming read and on a write
    fails with a did-you-mean hint naming the right option, creating nothing."""
    before = topics(wal)
    def hint(typed: str, meant: str) -> str:  # Spark may hand the option's key lowercased
        return rf"unknown option '(?i:{typed})'; did you mean '{meant}'\?"

    for stream in (False, True):
        with pytest.raises(PySparkException, match=hint("startStep", "startingStep")):
            reader(spark, wal, stream=stream, startStep="0")
    with pytest.raises(PySparkException, match=hint("regionColumns", "regionColumn")):
        write(spark.range(3).withColumn("r", F.lit(0)), wal, regionColumns="r")
    with pytest.raises(PySparkException, match=hint("mergeSchemas", "mergeSchema")):
        folder = json_dir(tmp_path / "json", [[{"id": 7}]])
        start_write(json_stream(spark, folder, "id long"), wal, str(tmp_path / "ck"),
                    mergeSchemas="true").awaitTermination()
    with pytest.raises(LogNotFound, match=f"unknown namespace '{wal['namespace']}'"):
        steps_of(wal)
    assert topics(wal) == before
