"""A step larger than a task's share read by several Spark tasks."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.backends("file", "kafka-confluent")]


def rows_of(df) -> list[tuple]:
    return sorted(map(tuple, df.select("id", "_region", "_sequence", "_row").collect()))


def test_one_big_step_is_read_by_many_tasks_with_the_same_rows(spark, wal, tmp_path):
    """This tests that a batch read and a stream of one 20,000-row step in one region,
    planned with minPartitions=4 (batch) and maxRowsPerPartition=6000 (stream), run as
    4 Spark tasks and give exactly the rows and row keys of a one-task read."""
    spark.range(20_000).selectExpr("id", "repeat('x', 200) AS pad").coalesce(1) \
        .write.format("durablewal").options(**wal).option("entryMaxBytes", "65536") \
        .mode("append").save()
    reader = spark.read.format("durablewal").options(**wal).option("metadataColumns", "all")
    one = reader.option("minPartitions", "1").load()
    split = reader.option("minPartitions", "4").load()
    assert one.rdd.getNumPartitions() == 1 and split.rdd.getNumPartitions() == 4
    expect = rows_of(one)
    assert len(expect) == 20_000 and rows_of(split) == expect
    out = str(tmp_path / "out")
    query = (spark.readStream.format("durablewal").options(**wal)
             .option("maxRowsPerPartition", "6000").option("metadataColumns", "all").load()
             .select("id", "_region", "_sequence", "_row").writeStream.format("parquet")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start(out))
    query.awaitTermination()
    assert query.exception() is None
    assert len(query.recentProgress) == 1
    assert sorted(map(tuple, spark.read.parquet(out).collect())) == expect
    assert len(list((tmp_path / "out").glob("part-*.parquet"))) == 4  # one file per task
