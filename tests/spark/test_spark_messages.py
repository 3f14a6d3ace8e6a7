"""What a user reads when a Spark query is pointed at the wrong thing or stopped.

Spark shows a Python data source's error as the last line of a Python traceback under
its own ``[PYTHON_DATA_SOURCE_ERROR]`` line; these tests pin that our line starts with
the problem and the fix.
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from pyspark_durable.endpoint import open_namespace
from pyspark_durable.errors import LogNotFound
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.sink import WalStreamWriter

pytestmark = pytest.mark.spark


def our_line(exc: BaseException, error: str) -> str:
    """The line of Spark's message that carries our error ``error`` (a class name)."""
    found = [line for line in str(exc).splitlines() if f"pyspark_durable.errors.{error}: " in line]
    assert len(found) == 1, str(exc)
    return found[0].split(f"pyspark_durable.errors.{error}: ", 1)[1]


def test_a_read_without_namespace_lists_the_namespaces_and_the_option(spark, tmp_path):
    """This tests that a batch or stream read without .option("namespace") (so of
    'default') fails with a line that starts with the unknown namespace, says how to
    pick one and lists the namespaces under the path (not a Spark checkpoint or a stray
    folder kept there), and that a path holding no namespace says so."""
    root = str(tmp_path / "wal")
    for name in ("shop", "audit"):
        spark.range(3).write.format("durablewal").option("namespace", name) \
            .mode("append").save(root)
    for folder in ("ckpt/commits", "ckpt/offsets", "stray"):  # no namespaces
        (tmp_path / "wal" / folder).mkdir(parents=True)
    (tmp_path / "wal" / "ckpt" / "metadata").write_text('{"id":"5f0e2c7a"}\n')
    for read in (spark.read, spark.readStream):
        with pytest.raises(PySparkException) as info:
            read.format("durablewal").load(root)
        assert our_line(info.value, "LogNotFound") == (
            "unknown namespace 'default' (the default: no .option(\"namespace\", ...) was "
            "given): pick one with .option(\"namespace\", NAME); namespaces in folder "
            f"{root}: audit, shop")
    with pytest.raises(PySparkException) as info:
        spark.read.format("durablewal").option("namespace", "shoop").load(root)
    assert our_line(info.value, "LogNotFound").startswith(
        "unknown namespace 'shoop': pick one with .option(\"namespace\", NAME); ")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PySparkException) as info:
        spark.read.format("durablewal").option("namespace", "shop").load(str(empty))
    assert our_line(info.value, "LogNotFound").startswith(
        f"unknown namespace 'shop': folder {empty} holds no namespace: point the read at the "
        "WAL root")
    assert list(empty.iterdir()) == []  # a read creates nothing


def test_a_write_that_is_not_append_says_durablewal_is_append_only(spark, tmp_path):
    """This tests that a write without a mode gets Spark's hint (Append or Overwrite),
    and that Overwrite is then refused by a line that starts with "durablewal is
    append-only" and the mode to use; nothing is written."""
    root = str(tmp_path / "wal")
    df = spark.range(3)
    with pytest.raises(PySparkException) as info:
        df.write.format("durablewal").option("namespace", "shop").save(root)
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in str(info.value)  # Spark's own, before us
    with pytest.raises(PySparkException) as info:
        df.write.format("durablewal").option("namespace", "shop").mode("overwrite").save(root)
    assert our_line(info.value, "ConfigError").startswith(
        'durablewal is append-only: use .mode("append"); a WAL never overwrites')
    assert not Path(root).exists()


def test_a_stream_aborted_by_stop_logs_one_line(caplog):
    """This tests that the sink's abort of a micro-batch (what q.stop() during a batch
    causes) logs one warning naming the batch and that its rows stay invisible, with no
    traceback, and raises nothing."""
    writer = WalStreamWriter(WalOptions.parse({"path": "/nonexistent", "namespace": "shop"}),
                             pa.schema([("id", pa.int64())]))
    with caplog.at_level(logging.WARNING, logger="pyspark_durable.spark.sink"):
        writer.abort([None, None], 7)
    [record] = caplog.records
    assert record.getMessage() == (
        "namespace=shop: micro-batch 7 aborted (query stopped, or a task failed: Spark's log "
        "says which); its rows stay invisible (0 of 2 tasks had written)")
    assert record.exc_info is None
    assert not Path("/nonexistent").exists()  # an abort opens nothing


def test_stop_during_a_micro_batch_ends_the_query_cleanly(spark, tmp_path):
    """This tests that q.stop() while a micro-batch is being written ends the query with
    no exception and commits nothing of that batch (its rows stay invisible)."""
    source = tmp_path / "in"
    source.mkdir()
    (source / "0.json").write_text("\n".join(json.dumps({"id": i}) for i in range(3)))
    root = str(tmp_path / "wal")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        server.settimeout(300)  # the batch's task connects when it starts
        port = server.getsockname()[1]

        @F.udf("long")
        def held(value):  # no type hints: pyspark would read them as an Arrow UDF's
            import socket

            with socket.create_connection(("127.0.0.1", port)) as conn:
                conn.recv(1)  # until the task is killed: the batch stays in flight
            return value

        q = (spark.readStream.schema("id long").json(str(source))
             .select(held("id").alias("id"))
             .writeStream.format("durablewal").option("namespace", "shop")
             .option("checkpointLocation", str(tmp_path / "ckpt")).start(root))
        conn, _ = server.accept()
        with conn:
            q.stop()
    assert q.exception() is None
    try:  # the sink's task may be killed before it opened (so created) the namespace
        ns = open_namespace({"backend": "file", "namespace": "shop",
                             "options": {"path": root}}, create=False)
    except LogNotFound:
        committed = 0
    else:
        committed = len(ns.steps())
        ns.close()
    assert committed == 0
