"""A streaming writer and a streaming reader of durablewal on a replicated Kafka cluster
keep running while brokers are killed with ``kill -9`` and restarted, one at a time:
the leader of the namespace's commits topic, the leader of its region topic, and
another node. One broker of three down must not fail a query (acks=all is met by the
two in-sync replicas left), and afterwards every input row is in the WAL, and in the
reader's output, exactly once, by content.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.kafka_cluster.kafka_cluster_tools import (
    ROWS_PER_FILE,
    SCHEMA,
    check_exactly_once,
    leader_of,
    partition_info,
    write_file,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.crash]

TRIGGER = "500 milliseconds"
FILES_PER_PHASE = 2  # input files written before a kill, and again while a node is down


@pytest.mark.parametrize("client", ["confluent"])
def test_streams_survive_broker_kills(spark, kafka_cluster, progress, tmp_path, client):
    """This tests that a durablewal writer and reader on a 3-node Kafka cluster (replication
    factor 3, min.insync.replicas 2) run on, without failing, while the leaders of the
    commits and region topics are killed (kill -9) and restarted, one after the other,
    and that every input row ends up in the WAL and in the reader's output exactly once.
    (A killed follower is test_two_brokers_down's.)"""
    cluster = kafka_cluster
    namespace = f"f{uuid.uuid4().hex[:10]}"
    wal = {"namespace": namespace, "backend": "kafka",
           "kafka.bootstrap.servers": cluster.bootstrap, "kafka.client": client,
           "kafka.replication.factor": "3", "kafka.min.insync.replicas": "2"}
    in_dir, out_dir = tmp_path / "in", tmp_path / "out"
    files = 0

    def feed(n: int) -> None:
        nonlocal files
        for _ in range(n):
            write_file(in_dir, files)
            files += 1

    feed(1)
    writer = reader = None
    try:
        writer = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                  .json(str(in_dir))
                  .writeStream.format("durablewal").options(**wal)
                  .option("checkpointLocation", str(tmp_path / "ckpt-writer"))
                  .queryName(f"json-to-wal-{client}").trigger(processingTime=TRIGGER).start())
        progress.wait_until([writer], lambda: progress.rows_of(writer) >= ROWS_PER_FILE,
                            "the writer's first micro-batch")
        reader = (spark.readStream.format("durablewal").options(**wal)
                  .option("metadataColumns", "_step").load()
                  .select("id", "payload", "_step")
                  .writeStream.format("parquet")
                  .option("checkpointLocation", str(tmp_path / "ckpt-reader"))
                  .queryName(f"wal-to-parquet-{client}").trigger(processingTime=TRIGGER)
                  .start(str(out_dir)))
        both = [writer, reader]

        def all_through(what: str) -> None:
            want = files * ROWS_PER_FILE
            progress.wait_until(both, lambda: progress.rows_of(writer) >= want
                                and progress.rows_of(reader) >= want, what)

        all_through("the first file in the WAL and in the output")
        commits, region = f"{namespace}_commits", f"{namespace}_region_0"
        for topic in (commits, region):
            _, replicas, isr = partition_info(cluster, topic)
            assert sorted(replicas) == sorted(isr) == [1, 2, 3], (topic, replicas, isr)

        killed: list[tuple[str, int]] = []
        downtime_s = 0.0
        for target in ("commits leader", "region_0 leader"):
            victim = leader_of(cluster, commits if target == "commits leader" else region)
            # data in flight when the node dies: files written, the writer busy with them
            feed(FILES_PER_PHASE)
            before = progress.batches_of(writer)
            progress.wait_until(both, lambda b=before: progress.batches_of(writer) > b,
                                f"a writer micro-batch before killing the {target}")
            cluster.kill(victim)
            down_at = time.monotonic()
            killed.append((target, victim))
            # with the node down, both queries move every new row through
            feed(FILES_PER_PHASE)
            all_through(f"every row with node {victim} ({target}) down")
            leader_after = leader_of(cluster, commits if "commits" in target else region)
            cluster.restart(victim)
            downtime_s += time.monotonic() - down_at
            print(f"\nkilled node {victim} ({target}); leader afterwards {leader_after}; "
                  f"{files} files through")

        feed(FILES_PER_PHASE)
        writer.processAllAvailable()
        reader.processAllAvailable()
        for q in both:
            assert q.isActive and q.exception() is None, (q.name, q.exception())
        assert not progress.terminated, f"a query stopped: {progress.terminated}"
        writer.stop()
        reader.stop()
        assert writer.exception() is None and reader.exception() is None

        in_wal = [(r.id, r.payload) for r in spark.read.format("durablewal").options(**wal)
                  .load().select("id", "payload").collect()]
        out = [(r.id, r.payload) for r in spark.read.parquet(str(out_dir))
               .select("id", "payload").collect()]
        n_wal = check_exactly_once(in_wal, files, "WAL")
        n_out = check_exactly_once(out, files, "reader output")
        print(f"\n{client}: {len(killed)} kills {killed}, {downtime_s:.0f}s with a node down; "
              f"{files} files, {n_wal} rows in the WAL and {n_out} in the output, each once; "
              f"writer {progress.batches_of(writer)} and reader {progress.batches_of(reader)} "
              "micro-batches with rows")
    finally:
        for q in (writer, reader):
            if q is not None and q.isActive:
                q.stop()
