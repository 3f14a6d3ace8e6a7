"""durablewal through Spark Connect: a client process talking to a Connect server JVM.

What must hold: with pyspark_durable installed in the server's Python, a Connect
client registers the source with pyspark_durable.register(spark) and runs batch and
streaming round trips on both backends. Shipping the package with
spark.addArtifacts(zip, pyfile=True) instead serves batch only (see the last test).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark

BATCH_ROWS = [[i, f"n{i}", "orders"] for i in range(6)]
STREAM_ROWS = [[i, f"e{i}", "events"] for i in range(8)]


def test_register_works_on_a_connect_session(connect):
    """This tests that pyspark_durable.register(spark) accepts a Spark Connect session."""
    assert connect.session_type == "pyspark.sql.connect.session.SparkSession"


@pytest.mark.backends("file", "kafka-confluent")
def test_a_connect_session_finds_durablewal_without_register(connect_server, make_client, wal):
    """This tests that a Connect session that never calls register() reads and writes
    format("durablewal"): the server finds the installed package's DefaultSource, as
    Spark 4 does for any installed pyspark_* package."""
    client = make_client()
    client.ok("connect", url=connect_server.url, register=False)
    assert client.ok("batch", wal=wal) == BATCH_ROWS


@pytest.mark.backends("file", "kafka-confluent")
def test_batch_round_trip_through_connect(connect, wal):
    """This tests that a batch write and a batch read from a Connect client return the rows by content."""
    assert connect.ok("batch", wal=wal) == BATCH_ROWS


@pytest.mark.backends("file", "kafka-confluent")
def test_streaming_round_trip_through_connect(connect, wal, tmp_path):
    """This tests that JSON files -> durablewal -> memory (file) or parquet (Kafka) with availableNow,
    started from a Connect client, delivers every row once."""
    sink = "memory" if wal.get("backend", "file") == "file" else "parquet"
    assert connect.ok("stream", wal=wal, work=str(tmp_path), sink=sink) == STREAM_ROWS


def test_add_artifacts_serves_batch_but_not_streaming_spark_behaviour(bare_connect_server, package_zip,
                                                                      make_client, tmp_path):
    """This tests that addArtifacts(zip, pyfile=True) on a server without pyspark_durable serves batch
    but not a streaming read: this documents Spark 4.3's behaviour (its Python streaming source runner
    looks for the session's files in <SparkFiles root>/streaming_job), and fails when Spark fixes it."""
    client = make_client()  # the client has the package, the server's Python has not
    client.ok("connect", url=bare_connect_server.url, artifact_zip=package_zip)
    wal = {"namespace": "art", "path": str(tmp_path / "wal")}
    assert client.ok("batch", wal=wal) == BATCH_ROWS
    answer = client.call("stream_read", wal=wal, work=str(tmp_path))
    assert not answer["ok"], "a streaming read through addArtifacts works now: update docs/deploying.md"
    assert "No module named 'pyspark_durable'" in answer["message"]
    assert "python_streaming_source_runner" in answer["message"]
