"""A WAL lost, recreated or restored under a Spark checkpoint: noticed, never silent.

A step an operator recorded lost (``durablewal repair``) fails a read naming it; with
``failOnDataLoss=false`` the read skips it and reads every other step once.

A namespace gets an incarnation id when it is created; every commits-log record and
every source offset names it. A reader whose checkpoint names another incarnation, or
a step past the WAL's end, fails with a data-loss error naming both (with
``failOnDataLoss=false`` it warns and reads the WAL as it is now); a streaming writer
whose query committed batches the WAL does not know fails instead of starting over.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from pyspark.errors import PySparkException, StreamingQueryException

from pyspark_durable.cli import main as durablewal
from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import ConfigError
from pyspark_durable.spark.restarts import await_restarting
from tests.helpers import flip_a_byte_of_entry

pytestmark = pytest.mark.spark
AUTO_CREATE_RACES = 5


def endpoint(opts: dict) -> dict:
    if opts.get("backend") == "kafka":
        return {"backend": "kafka", "namespace": opts["namespace"],
                "options": {"bootstrap_servers": opts["kafka.bootstrap.servers"]}}
    return {"backend": "file", "namespace": opts["namespace"], "options": {"path": opts["path"]}}


def recreate(opts: dict):
    """The WAL is lost (its folder deleted, or its topics lost by the broker) and made
    again at once: a namespace of the same name, a new incarnation.

    (At once, because the test broker re-creates a deleted topic with 4 partitions as
    soon as any client that still knows it asks for metadata; a real Kafka with
    auto-creation off does not.)
    """
    if opts.get("backend") != "kafka":
        shutil.rmtree(Path(opts["path"]) / opts["namespace"])
        return open_namespace(endpoint(opts))
    admin = KafkaAdminClient(bootstrap_servers=opts["kafka.bootstrap.servers"])
    try:
        topics = [t for t in admin.list_topics() if t.startswith(opts["namespace"] + "_")]
        admin.delete_topics(topics)
    finally:
        admin.close()
    for attempt in range(AUTO_CREATE_RACES):
        try:  # the library replaces an empty auto-created topic; a stale client may
            return open_namespace(endpoint(opts))  # auto-create it again meanwhile
        except ConfigError as exc:
            if "partitions" not in str(exc) or attempt == AUTO_CREATE_RACES - 1:
                raise
    raise AssertionError("unreachable")


def stream_read(spark, opts: dict, out: Path, ckpt: Path, **extra):
    """Run a reading query to its end; the query that ended (the test looks at its
    exception). One that failed only because a Python worker missed Spark's fixed 10 s
    to connect back (a loaded machine) is started again from its checkpoint
    (``await_restarting``): the failures under test are all others."""
    started = []

    def start():
        started.append(
            spark.readStream.format("durablewal").options(**opts, **extra)
            .option("metadataColumns", "_step").load().select("id", "src", "_step")
            .writeStream.format("json").option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True).start(str(out)))
        return started[-1]

    try:
        await_restarting(start)
    except StreamingQueryException:
        pass  # the test looks at the query's exception()
    return started[-1]


def rows(spark, out: Path) -> list[tuple]:
    return sorted((r.id, r.src) for r in spark.read.json(str(out)).collect())


@pytest.mark.backends("file", "kafka-confluent")
def test_reader_checkpoint_of_a_recreated_wal_fails_or_reads_the_new_one(spark, wal, tmp_path):
    """This tests that a stream reader restarted on a checkpoint of a WAL that was lost
    and recreated fails naming both incarnations, and with failOnDataLoss=false reads
    the new WAL from its first step, each new row once."""
    cfg = endpoint(wal)
    old = open_namespace(cfg)
    for i in range(5):
        write_step(old, "old", i, {"t": [{"id": i, "src": "old"}]})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    assert stream_read(spark, wal, out, ckpt).exception() is None
    assert len(rows(spark, out)) == 5
    old_incarnation = old.info.incarnation
    old.close()
    new = recreate(wal)
    for i in range(2):
        write_step(new, "new", i, {"t": [{"id": 100 + i, "src": "new"}]})
    assert new.info.incarnation != old_incarnation
    failed = stream_read(spark, wal, out, ckpt)
    text = str(failed.exception())
    assert failed.exception() is not None
    assert f"incarnation {old_incarnation}" in text and f"incarnation {new.info.incarnation}" in text
    assert "set failOnDataLoss=false" in text
    assert len(rows(spark, out)) == 5  # nothing was read from the new WAL
    went_on = stream_read(spark, wal, out, ckpt, failOnDataLoss="false")
    assert went_on.exception() is None
    assert rows(spark, out) == [(i, "old") for i in range(5)] + [(100, "new"), (101, "new")]


def test_reader_checkpoint_past_a_restored_wal_fails(spark, tmp_path):
    """This tests that a reader whose checkpoint is past the end of a WAL restored from an
    older copy (same incarnation, fewer steps) fails naming the step and the WAL's end."""
    opts = {"namespace": "restored", "path": str(tmp_path / "wal")}
    ns = open_namespace(endpoint(opts))
    for i in range(2):
        write_step(ns, "w", i, {"t": [{"id": i, "src": "a"}]})
    ns.close()
    shutil.copytree(tmp_path / "wal", tmp_path / "backup")
    ns = open_namespace(endpoint(opts))
    for i in range(2, 5):
        write_step(ns, "w", i, {"t": [{"id": i, "src": "a"}]})
    ns.close()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    assert stream_read(spark, opts, out, ckpt).exception() is None
    shutil.rmtree(tmp_path / "wal")
    shutil.copytree(tmp_path / "backup", tmp_path / "wal")
    failed = stream_read(spark, opts, out, ckpt)
    assert "the checkpoint's offset is step 5, past the WAL's last step 1" in \
        str(failed.exception())


@pytest.mark.backends("file", "kafka-confluent")
def test_streaming_writer_into_a_recreated_wal_fails_instead_of_starting_over(spark, wal,
                                                                              tmp_path):
    """This tests that a streaming writer whose query committed batches into a WAL that
    was then lost fails on its next batch naming the writer step and the incarnation,
    and commits nothing into the new WAL."""
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    src.mkdir()

    def run():
        q = (spark.readStream.schema("id long, src string").option("maxFilesPerTrigger", 1)
             .json(str(src)).writeStream.format("durablewal").options(**wal)
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        try:
            q.awaitTermination()
        except StreamingQueryException:
            pass  # the test looks at q.exception()
        return q

    for f in range(2):
        (src / f"{f}.json").write_text(json.dumps({"id": f, "src": "in"}) + "\n")
    assert run().exception() is None
    before = open_namespace(endpoint(wal))
    assert before.steps() == range(0, 2)
    before.close()  # a client left open would ask the broker for the deleted topics
    recreate(wal).close()
    (src / "2.json").write_text(json.dumps({"id": 2, "src": "in"}) + "\n")
    failed = run()
    text = str(failed.exception())
    assert "writer step 2 follows step 1, but this WAL (incarnation" in text, text
    assert "knows none of its steps" in text
    assert open_namespace(endpoint(wal)).steps() == range(0, 0)


@pytest.mark.backends("file", "kafka-confluent")
def test_batch_read_in_the_same_session_sees_a_recreated_wal(spark, wal):
    """This tests that after a WAL was lost and recreated, a batch read in the same
    SparkSession (whose Python workers cached handles of the old WAL) returns the new
    WAL's rows, with no error from stale state."""
    cfg = endpoint(wal)
    for round_, src in enumerate(("first", "second")):
        ns = recreate(wal) if round_ else open_namespace(cfg)
        for i in range(3):
            write_step(ns, "w", i, {"t": [{"id": i + 10 * round_, "src": src}]})
        ns.close()
        got = spark.read.format("durablewal").options(**wal).load().collect()
        assert sorted((r.id, r.src) for r in got) == [(i + 10 * round_, src) for i in range(3)]
    assert read_steps(open_namespace(cfg), "t").num_rows == 3


def test_a_step_recorded_lost_fails_a_read_or_is_skipped(spark, tmp_path, capsys):
    """This tests that after ``durablewal repair`` recorded a damaged step lost, a batch
    read and a stream fail naming the step, and with failOnDataLoss=false the batch read
    and the same stream (its checkpoint kept) read every other step once, by content."""
    opts = {"namespace": "shop", "path": str(tmp_path / "wal")}
    ns = open_namespace(endpoint(opts))
    for i in range(6):
        write_step(ns, "w", i, {"t": [{"id": i, "src": f"step-{i}"}]})
    lost = ns.step_commit(2).runs[0]
    ns.close()
    flip_a_byte_of_entry(tmp_path / "wal" / "shop" / f"region_{lost.region_id}", lost.start)
    assert durablewal(["repair", opts["path"], "--namespace", "shop"]) == 0, capsys.readouterr()
    others = [(i, f"step-{i}") for i in range(6) if i != 2]

    reader = spark.read.format("durablewal").options(**opts).option("metadataColumns", "_step")
    with pytest.raises(PySparkException, match="step 2 is lost") as info:
        reader.load().collect()
    assert "durablewal repair" in str(info.value)
    got = reader.option("failOnDataLoss", "false").load().select("id", "src", "_step").collect()
    assert sorted((r.id, r.src) for r in got) == others
    assert all(r.id == r._step for r in got)

    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    failed = stream_read(spark, opts, out, ckpt)
    assert "step 2 is lost" in str(failed.exception())
    went_on = stream_read(spark, opts, out, ckpt, failOnDataLoss="false")
    assert went_on.exception() is None
    assert rows(spark, out) == others
