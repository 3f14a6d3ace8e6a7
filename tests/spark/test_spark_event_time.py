"""Event time per step through Spark: eventTimeColumn on the writer,
_event_time_min/_event_time_max and startingEventTime on readers, `durablewal steps`."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from pyspark_durable.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.backends("file", "kafka-confluent")]
DAYS = [(1, 3), (10, 12), (5, 6)]  # each step's event days in January 2026


def test_writer_event_time_reaches_readers_and_selects_steps(spark, wal, tmp_path, capsys):
    """This tests that three batch writes with eventTimeColumn record each step's span,
    that a read shows it per row, that startingEventTime between two spans starts at the
    first step whose max reaches it (batch and stream), and that `durablewal steps
    --json` shows the spans; a string event column is refused before writing."""
    for lo, hi in DAYS:
        spark.createDataFrame([(lo, dt.datetime(2026, 1, lo)), (hi, dt.datetime(2026, 1, hi))],
                              "id long, at timestamp") \
            .write.format("durablewal").options(**wal).option("eventTimeColumn", "at") \
            .mode("append").save()
    rows = spark.read.format("durablewal").options(**wal).option("metadataColumns", "all") \
        .load().select("_step", "_event_time_min", "_event_time_max").distinct().collect()
    assert sorted((r[0], r[1].day, r[2].day) for r in rows) == [
        (i, lo, hi) for i, (lo, hi) in enumerate(DAYS)]
    since = spark.read.format("durablewal").options(**wal).option("metadataColumns", "_step") \
        .option("startingEventTime", "2026-01-07T00:00:00").load()
    assert sorted(r.id for r in since.collect()) == [5, 6, 10, 12] and \
        {r._step for r in since.collect()} == {1, 2}
    query = (spark.readStream.format("durablewal").options(**wal)
             .option("startingEventTime", "2026-01-11T00:00:00").load()
             .writeStream.format("memory").queryName("event_time_stream")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert sorted(r.id for r in spark.table("event_time_stream").collect()) == [5, 6, 10, 12]
    with pytest.raises(Exception, match="eventTimeColumn 'name' has type string"):
        spark.createDataFrame([(1, "x")], "id long, name string").write \
            .format("durablewal").options(**wal).option("eventTimeColumn", "name") \
            .mode("append").save()
    if "path" in wal:
        assert main(["steps", wal["path"], "--namespace", wal["namespace"], "--json"]) == 0
        steps = json.loads(capsys.readouterr().out)["steps"]
        assert [s["event_time"][0][:10] for s in steps] == ["2026-01-01", "2026-01-10",
                                                            "2026-01-05"]
