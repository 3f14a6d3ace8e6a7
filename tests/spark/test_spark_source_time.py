"""What a Spark user expects of a source: startingTimestamp and
endingTimestamp, with the meaning of Spark's Kafka source, over steps' commit times."""

from __future__ import annotations

import types

import pytest
from pyspark.errors import PySparkException

from pyspark_durable.endpoint import write_step
from tests.helpers import wal_namespace
from tests.spark.spark_io import reader

pytestmark = [pytest.mark.spark, pytest.mark.backends("file", "kafka-confluent")]
TIMES_MS = (1_000_000, 2_000_000, 3_000_000)  # commit times of steps 0, 1, 2


@pytest.fixture
def timed(wal: dict, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Steps 0..2 of table t, one row each (id = step), committed at TIMES_MS, on the
    file log and on Kafka (conftest's ``wal``)."""
    import pyspark_durable.wal.namespace as namespace_module

    ns = wal_namespace(wal)
    for step, millis in enumerate(TIMES_MS):
        monkeypatch.setattr(namespace_module, "time",
                            types.SimpleNamespace(time=lambda m=millis: m / 1000))
        write_step(ns, "loader", step, {"t": [{"id": step}]})
    monkeypatch.undo()
    ns.close()
    return wal


def ids(df) -> list[int]:
    return sorted(r.id for r in df.select("id").collect())


def test_batch_read_between_two_commits_starts_at_the_later_step(spark, timed):
    """This tests that a batch read with startingTimestamp between two steps' commits
    starts at the later step, and that endingTimestamp is exclusive."""
    assert ids(reader(spark, timed, startingTimestamp="1500000")) == [1, 2]
    assert ids(reader(spark, timed, startingTimestamp="1970-01-01T00:25:00Z")) == [1, 2]
    assert ids(reader(spark, timed, endingTimestamp="3000000")) == [0, 1]
    assert ids(reader(spark, timed, startingTimestamp="1500000",
                      endingTimestamp="2500000")) == [1]


def test_stream_read_between_two_commits_starts_at_the_later_step(spark, timed, tmp_path):
    """This tests that a streaming read with startingTimestamp between two steps'
    commits reads from the later step on."""
    out = tmp_path / "out"
    q = (reader(spark, timed, stream=True, startingTimestamp="2500000").writeStream
         .format("parquet").option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start(str(out)))
    q.awaitTermination()
    assert q.exception() is None
    assert ids(spark.read.parquet(str(out))) == [2]


def test_batch_read_after_the_last_commit_says_what_exists(spark, timed):
    """This tests that a batch read starting after the last commit fails naming the
    committed steps and their commit times, and that a step and a timestamp together
    are refused."""
    with pytest.raises(PySparkException, match=r"StepNotCommitted.*startingTimestamp="
                       r"1970-01-01T00:50:00.001Z \(3000001 ms\) is after the last commit"
                       r".*steps \[0, 3\) were committed from 1970-01-01T00:16:40.000Z"):
        reader(spark, timed, startingTimestamp="3000001").collect()
    with pytest.raises(PySparkException, match="startingStep='1' and startingTimestamp="):
        reader(spark, timed, startingStep="1", startingTimestamp="1500000").collect()
