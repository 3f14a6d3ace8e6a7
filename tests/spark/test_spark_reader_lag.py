"""A reader's lag in a running application: pyspark_durable.spark.lag.LagListener
(PySpark 4.3's Python sources cannot add metrics to query progress)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from helpers import wal_namespace
from progress_events import WAIT_S
from spark_io import reader

from pyspark_durable.endpoint import write_step
from pyspark_durable.endpoint.lag import ReaderLag
from pyspark_durable.spark.lag import LagListener

pytestmark = pytest.mark.spark
STEPS = 5


def test_lag_listener_reports_a_reader_behind_a_writer(spark, wal, tmp_path: Path):
    """This tests that with a writer ahead of a running reader (one step per batch), the
    listener reports the reader's steps, rows, bytes and seconds behind on progress
    events, shrinking as it catches up; sources' progress keeps the WAL's end (file log
    and Kafka)."""
    opts, namespace = wal, wal["namespace"]
    ns = wal_namespace(wal)
    for step in range(STEPS):
        write_step(ns, "loader", step, {"t": [{"id": step * 10 + i} for i in range(10)]})
    seen: list[ReaderLag] = []
    cond = threading.Condition()

    def on_lag(lag: ReaderLag) -> None:
        with cond:
            seen.append(lag)
            cond.notify_all()

    listener = LagListener(opts, reader_id="dashboard", on_lag=on_lag)
    spark.streams.addListener(listener)
    query = None
    try:
        query = (reader(spark, opts, stream=True, readerId="dashboard", maxStepsPerTrigger="1")
                 .writeStream.format("noop").queryName(f"lag_{namespace}")
                 .option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(processingTime="200 milliseconds").start())
        with cond:
            # Spark commits a batch to the source when it plans the next batch with
            # data, so the position a reader records trails its last batch: with no
            # new step after it, the lag stays at that one step
            caught_up = cond.wait_for(lambda: any(lag.steps_behind <= 1 for lag in seen)
                                      or not query.isActive, timeout=WAIT_S)
        assert caught_up and query.isActive, (query.exception(), seen)
        behind = [lag for lag in seen if lag.steps_behind > 0]
        assert behind, f"the listener never saw the reader behind: {seen}"
        first = behind[0]
        assert first.rows_behind == 10 * first.steps_behind
        assert first.bytes_behind > 0 and first.seconds_behind > 0
        assert first.end_step == STEPS
        assert [lag.steps_behind for lag in seen] == sorted(
            (lag.steps_behind for lag in seen), reverse=True)
        assert json.loads(query.lastProgress["sources"][0]["latestOffset"])["step"] == STEPS
    finally:
        if query is not None:
            query.stop()
        spark.streams.removeListener(listener)
        ns.close()
