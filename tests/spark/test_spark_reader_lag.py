"""A reader's lag in a running application: pyspark_durable.spark.lag.LagListener
(PySpark 4.3's Python sources cannot add metrics to query progress)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from pyspark_durable.cli import main
from pyspark_durable.endpoint import write_step
from pyspark_durable.endpoint.lag import ReaderLag, reader_lags
from pyspark_durable.spark.lag import LagListener
from tests.helpers import wal_namespace
from tests.spark.progress_events import WAIT_S
from tests.spark.spark_io import reader

pytestmark = pytest.mark.spark
STEPS = 5


IDLE_EVENT_MS = "200"  # an idle query's event at most this often (Spark's default: 10 s)


@pytest.mark.backends("file", "kafka-confluent")
def test_lag_listener_reports_a_reader_behind_a_writer(spark, wal, tmp_path: Path):
    """This tests that with a writer ahead of a running reader (one step per batch, the
    second held until the listener's first report), the listener reports the reader's
    steps, rows, bytes and seconds behind on progress events, shrinking as it catches up,
    then 0 steps, rows and seconds on the idle query's events, staying 0 while it idles;
    sources' progress keeps the WAL's end (file log and Kafka)."""
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

    def caught_up(times: int) -> bool:
        return sum(lag.steps_behind == 0 for lag in seen) >= times or not query.isActive

    def held(batch, batch_id: int) -> None:
        """Read the batch; from the second one on, first wait for the listener's first
        report, so it reports while the reader is still behind however late Spark's
        listener bus delivers the events (it runs apart from the query)."""
        batch.write.format("noop").mode("overwrite").save()
        if batch_id >= 1:
            with cond:
                assert cond.wait_for(lambda: bool(seen), timeout=WAIT_S), "no lag reported"

    listener = LagListener(opts, reader_id="dashboard", on_lag=on_lag)
    spark.streams.addListener(listener)
    query = None
    interval = spark.conf.get("spark.sql.streaming.noDataProgressEventInterval")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", IDLE_EVENT_MS)
    try:
        query = (reader(spark, opts, stream=True, readerId="dashboard", maxStepsPerTrigger="1")
                 .writeStream.foreachBatch(held).queryName(f"lag_{namespace}")
                 .option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(processingTime="200 milliseconds").start())
        spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", interval)
        with cond:  # caught up, then idle for two more of its events
            reached = cond.wait_for(lambda: caught_up(3), timeout=WAIT_S)
        assert reached and query.isActive, (query.exception(), seen)
        behind = [lag for lag in seen if lag.steps_behind > 0]
        assert behind, f"the listener never saw the reader behind: {seen}"
        first = behind[0]
        assert first.rows_behind == 10 * first.steps_behind
        assert first.bytes_behind > 0 and first.seconds_behind > 0
        assert first.end_step == STEPS
        assert [lag.steps_behind for lag in seen] == sorted(
            (lag.steps_behind for lag in seen), reverse=True)
        idle = [lag for lag in seen if lag.steps_behind == 0]
        assert all((lag.rows_behind, lag.bytes_behind, lag.seconds_behind, lag.next_step)
                   == (0, 0, 0.0, STEPS) for lag in idle), idle
        assert json.loads(query.lastProgress["sources"][0]["latestOffset"])["step"] == STEPS
    finally:
        spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", interval)
        if query is not None:
            query.stop()
        spark.streams.removeListener(listener)
        ns.close()


def copy_available_now(spark, opts: dict, ckpt: Path, **extra: str) -> int:
    """Run a ``readerId="nightly"`` copy with ``availableNow`` to its end; the rows it read."""
    query = (reader(spark, opts, stream=True, readerId="nightly", **extra)
             .writeStream.format("noop").option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return sum(p["numInputRows"] for p in query.recentProgress)


def test_available_now_reader_that_read_everything_is_0_behind(spark, tmp_path: Path, capsys):
    """This tests that an availableNow reader is registered with readerId and, having read
    everything, is 0 steps, 0 rows and 0 seconds behind, in one batch and in several
    (maxStepsPerTrigger), in the API, `durablewal lag --json` and its Prometheus text."""
    opts = {"namespace": "nightly", "path": str(tmp_path / "wal")}
    ns = wal_namespace(opts)
    try:
        for step in range(3):
            write_step(ns, "loader", step, {"t": [{"id": i} for i in range(100)]})
        assert copy_available_now(spark, opts, tmp_path / "ckpt") == 300  # one batch
        lags = reader_lags(ns)
        assert [lag.reader for lag in lags] == ["nightly"], "the reader did not register"
        [lag] = lags
        assert (lag.reader, lag.next_step, lag.steps_behind, lag.rows_behind,
                lag.seconds_behind) == ("nightly", 3, 0, 0, 0.0), lag
        for step in range(3, 6):
            write_step(ns, "loader", step, {"t": [{"id": i} for i in range(100)]})
        [lag] = reader_lags(ns)
        assert (lag.steps_behind, lag.rows_behind) == (3, 300) and lag.seconds_behind > 0, lag
        assert copy_available_now(spark, opts, tmp_path / "ckpt", maxStepsPerTrigger="1") == 300
        [lag] = reader_lags(ns)
        assert (lag.next_step, lag.steps_behind, lag.rows_behind, lag.bytes_behind,
                lag.seconds_behind) == (6, 0, 0, 0, 0.0), lag
    finally:
        ns.close()
    assert main(["lag", opts["path"], "--namespace", "nightly", "--json"]) == 0
    [doc] = json.loads(capsys.readouterr().out)["readers"]
    assert (doc["reader"], doc["steps_behind"], doc["seconds_behind"]) == ("nightly", 0, 0.0)
    assert main(["lag", opts["path"], "--namespace", "nightly", "--format", "prometheus"]) == 0
    out = capsys.readouterr().out
    assert 'durablewal_reader_lag_seconds{namespace="nightly",reader="nightly"} 0.0\n' in out
    assert 'durablewal_reader_lag_steps{namespace="nightly",reader="nightly"} 0\n' in out
