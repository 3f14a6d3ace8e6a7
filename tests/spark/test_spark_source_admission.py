"""What a Spark user expects of a source: minRowsPerTrigger with
maxTriggerDelay, as Spark's Kafka source has minOffsetsPerTrigger with maxTriggerDelay."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pyspark_durable.endpoint import write_step
from tests.helpers import wal_namespace
from tests.spark.progress_events import ProgressEvents
from tests.spark.spark_io import reader

pytestmark = [pytest.mark.spark, pytest.mark.backends("file", "kafka-confluent")]
DELAY_S = 2.0


def test_min_rows_runs_a_smaller_batch_after_max_trigger_delay(spark, wal, tmp_path: Path):
    """This tests that a running query whose minRowsPerTrigger is more than was written
    reads the rows there are once maxTriggerDelay passed, not before, and that after that
    batch the next small one waits the delay again (file log and Kafka)."""
    namespace = wal["namespace"]
    ns = wal_namespace(wal)
    write_step(ns, "loader", 0, {"t": [{"id": i} for i in range(3)]})
    events = ProgressEvents()
    spark.streams.addListener(events)
    query = None
    try:
        started = time.monotonic()
        query = (reader(spark, wal, stream=True,
                        minRowsPerTrigger="1000", maxTriggerDelay=f"{DELAY_S:g}s")
                 .writeStream.format("noop").queryName(f"delay_{namespace}")
                 .option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(processingTime="200 milliseconds").start())
        events.wait_until(query, lambda: len(events.with_rows(query)) >= 1, "the small batch")
        first_at, first = events.with_rows(query)[0]
        assert first["numInputRows"] == 3
        assert first_at - started >= DELAY_S, \
            f"3 rows < minRowsPerTrigger=1000 ran after {first_at - started:.2f}s, " \
            f"before maxTriggerDelay={DELAY_S}s"

        write_step(ns, "loader", 1, {"t": [{"id": i} for i in range(3, 5)]})
        events.wait_until(query, lambda: len(events.with_rows(query)) >= 2, "a second batch")
        second = events.with_rows(query)[1][1]
        assert second["numInputRows"] == 2
        # progress timestamps are trigger starts, each a little before the trigger's
        # admission check: half the delay is margin for that, and far above the 0.2 s
        # trigger interval a timer that did not restart would give
        gap_s = (_ms(second["timestamp"]) - _ms(first["timestamp"])) / 1000
        assert gap_s >= DELAY_S / 2, f"the second small batch ran {gap_s:.2f}s after the first"
    finally:
        if query is not None:
            query.stop()
        spark.streams.removeListener(events)


def _ms(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000
