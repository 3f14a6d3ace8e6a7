"""A running streaming query on the S3 log whose server is killed and restarted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from pyspark_durable.endpoint import read_steps
from tests.helpers import S3_BUCKET, s3_options, s3_spark_options, wal_namespace
from tests.s3_server import seaweed_for_tests

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.crash]
ROWS = 50  # per input file


def write_file(folder: Path, n: int) -> None:
    lines = [json.dumps({"id": n * ROWS + i, "payload": f"p{n}-{i}"}) for i in range(ROWS)]
    tmp = folder / f".{n}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(folder / f"{n:03d}.json")  # whole, as the file source wants it


def test_a_query_whose_server_is_killed_fails_typed_and_resumes_exactly_once(spark, tmp_path):
    """This tests that a running query on the S3 log, its server killed with SIGKILL,
    fails with the log's typed, retriable error naming the endpoint; and that, the server
    restarted, the query restarted from its checkpoint holds every row exactly once."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    with seaweed_for_tests(tmp_path / "seaweed") as server:
        server.make_bucket(S3_BUCKET)
        wal = {"namespace": "live", **s3_spark_options(s3_options(server, max_attempts="2"))}
        path = wal.pop("path")  # given as users give it: .start(path), .load(path)

        def start():
            return (spark.readStream.schema("id long, payload string")
                    .option("maxFilesPerTrigger", 1).json(str(inputs))
                    .writeStream.format("durablewal").options(**wal)
                    .option("checkpointLocation", str(tmp_path / "ckpt"))
                    .trigger(processingTime="100 milliseconds").start(path))

        write_file(inputs, 0)
        write_file(inputs, 1)
        query = start()
        query.processAllAvailable()
        server.kill()
        write_file(inputs, 2)
        with pytest.raises(StreamingQueryException) as caught:
            query.processAllAvailable()
        message = str(caught.value)
        assert "BackendUnavailable" in message or "AppendIndeterminate" in message, message
        assert server.endpoint.removeprefix("http://") in message, message
        assert not query.isActive
        server.restart()
        write_file(inputs, 3)
        query = start()
        query.processAllAvailable()
        query.stop()
        ns = wal_namespace({**wal, "path": path}, create=False)
        try:
            got = read_steps(ns, "default")
        finally:
            ns.close()
        spark_rows = spark.read.format("durablewal").options(**wal).load(path) \
            .select("id", "payload").collect()
    assert sorted((r.id, r.payload) for r in spark_rows) == sorted(
        zip(got.column("id").to_pylist(), got.column("payload").to_pylist(), strict=True))
    ids = got.column("id").to_pylist()
    assert sorted(ids) == list(range(4 * ROWS)), "lost or duplicated rows"
    assert got.column("payload").to_pylist() == [f"p{i // ROWS}-{i % ROWS}" for i in ids]
