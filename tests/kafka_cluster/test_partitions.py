"""Network partitions under a running streaming writer and reader on the 3-node cluster.

Clients reach each node only through its proxy (tests/netproxy.py, the ``net``
fixture); the nodes talk to each other directly, so a cut proxy partitions the client
from a node the cluster still counts alive and in sync (no leader moves). In turn:

1. One node, leading none of the namespace's partitions, is cut off: both queries run on.
2. The client is cut from every node during a commit: the commit record reaches the
   commits topic's leader and its answer is lost (an indeterminate commit), and every
   other link goes dead. The writer fails with a retriable BackendUnavailable; healed
   and restarted from their checkpoints, the queries resolve it by the retry rule.
3. The commits leader's link is slow (latency per chunk): the queries slow down and do
   not fail.

Afterwards every input row is in the WAL and in the reader's output exactly once, by
content. The topics are made first with their leaders chosen (commits on node 1,
region 0 and snapshots on node 2, node 3 leads nothing), so each cut hits what it
means to.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.kafka_cluster.kafka_cluster_tools import (
    ROWS_PER_FILE,
    SCHEMA,
    WAIT_S,
    check_exactly_once,
    leader_of,
    write_file,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.crash]

TRIGGER = "500 milliseconds"
REQUEST_MS = 3000
LATENCY_MS = 100
COMMITS_LEADER, REGION_LEADER, IDLE_NODE = 1, 2, 3
WAL_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "min.insync.replicas": "2"}


def make_topics(cluster, namespace: str) -> None:
    """The namespace's commits, snapshots and region 0 topics, each led by a chosen node
    (the first replica of the assignment is the preferred leader); node 3 leads none."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from pyspark_durable.log.kafka.topics import SNAPSHOTS_TOPIC_CONFIG

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    specs = [NewTopic(f"{namespace}_commits", 1, replica_assignment=[[COMMITS_LEADER, 2, 3]],
                      config=WAL_TOPIC_CONFIG),
             NewTopic(f"{namespace}_region_0", 1, replica_assignment=[[REGION_LEADER, 3, 1]],
                      config=WAL_TOPIC_CONFIG),
             NewTopic(f"{namespace}_snapshots", 1, replica_assignment=[[REGION_LEADER, 1, 3]],
                      config={**SNAPSHOTS_TOPIC_CONFIG, "min.insync.replicas": "2"})]
    for future in admin.create_topics(specs, request_timeout=30).values():
        future.result()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:  # creation is asynchronous: metadata shows it
        try:
            if (leader_of(cluster, f"{namespace}_commits") == COMMITS_LEADER
                    and leader_of(cluster, f"{namespace}_region_0") == REGION_LEADER):
                return
        except (AssertionError, KeyError):
            pass
        time.sleep(0.2)  # the broker pushes no event for a created topic: ask again
    raise AssertionError(f"the topics of {namespace} have not the leaders assigned")


def test_partitions_under_running_queries(spark, kafka_cluster, net, progress, tmp_path):
    """This tests that a streaming durablewal writer and reader (confluent client) on a
    3-node cluster run on while a node leading none of their partitions is cut off;
    that cutting them from every node during a commit (the commit record stored, its
    answer lost) fails the writer with a retriable BackendUnavailable within the bound;
    that both, healed and restarted from their checkpoints, go on; that a slow link to
    the commits leader slows them without a failure; and that every input row is in
    the WAL and in the output exactly once."""
    cluster = kafka_cluster
    namespace = f"n{uuid.uuid4().hex[:10]}"
    make_topics(cluster, namespace)
    link = {n.node_id: net.by_port[n.port] for n in cluster.nodes}
    wal = {"namespace": namespace, "backend": "kafka",
           "kafka.bootstrap.servers": cluster.client_bootstrap, "kafka.client": "confluent",
           "kafka.replication.factor": "3", "kafka.min.insync.replicas": "2",
           "kafka.request.timeout.ms": str(REQUEST_MS), "kafka.connect.timeout.ms": "3000"}
    in_dir, out_dir = tmp_path / "in", tmp_path / "out"
    files = 0
    report: list[str] = []

    def feed(n: int) -> None:
        nonlocal files
        for _ in range(n):
            write_file(in_dir, files)
            files += 1

    def start_writer():
        return (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                .json(str(in_dir)).writeStream.format("durablewal").options(**wal)
                .option("checkpointLocation", str(tmp_path / "ckpt-writer"))
                .queryName("json-to-wal-partitions").trigger(processingTime=TRIGGER).start())

    def start_reader():
        return (spark.readStream.format("durablewal").options(**wal)
                .option("metadataColumns", "all").load()
                .select("id", "payload", "_step").writeStream.format("parquet")
                .option("checkpointLocation", str(tmp_path / "ckpt-reader"))
                .queryName("wal-to-parquet-partitions").trigger(processingTime=TRIGGER)
                .start(str(out_dir)))

    def all_through(queries, what: str, base: dict) -> float:
        """Wait until every fed row went through both queries (rows counted since
        ``base``, the queries' counts when they started); the seconds it took."""
        start = time.monotonic()
        want = files * ROWS_PER_FILE
        writer, reader = queries
        progress.wait_until(queries, lambda: progress.rows_of(writer) + base["w"] >= want
                            and progress.rows_of(reader) + base["r"] >= want, what)
        return time.monotonic() - start

    feed(1)
    writer, reader = start_writer(), None
    try:
        progress.wait_until([writer], lambda: progress.rows_of(writer) >= ROWS_PER_FILE,
                            "the writer's first micro-batch")
        reader = start_reader()
        base = {"w": 0, "r": 0}
        all_through([writer, reader], "the first file through", base)

        # 1. a node leading nothing of the namespace is cut off: nothing fails
        link[IDLE_NODE].set("blackhole")
        feed(2)
        took = all_through([writer, reader], f"every row with node {IDLE_NODE} cut off", base)
        link[IDLE_NODE].set("forward")
        report.append(f"node {IDLE_NODE} cut (leads nothing): 2 files through in {took:.1f}s, "
                      "no failure")

        # 2. cut from every node during a commit: the commit record stored, answer lost
        link[COMMITS_LEADER].set("answers_lost_after_produce")
        feed(1)
        assert link[COMMITS_LEADER].tripped.wait(WAIT_S), "no commit reached the commits leader"
        cut_at = time.monotonic()
        for node_id in (REGION_LEADER, IDLE_NODE):
            link[node_id].set("blackhole")
        error = progress.wait_terminated(writer)
        took_error = time.monotonic() - cut_at
        assert error is not None and "BackendUnavailable" in error, (error or "")[:3000]
        assert "accept connections" not in error, error[:3000]
        # the writer's bound: one commit's delivery timeout + 2 s, for each of Spark's
        # commit attempts of the batch, with a loaded machine's slack
        assert took_error < 60, f"the writer failed only {took_error:.0f}s after the cut"
        report.append(f"cut from all nodes during a commit: the writer failed after "
                      f"{took_error:.1f}s with {error.splitlines()[0][:300]}")
        net.set_all("forward")
        reader_error = None
        if not reader.isActive:
            reader_error = progress.wait_terminated(reader)
        else:
            reader.stop()
        report.append("the reader: " + (f"failed: {reader_error.splitlines()[0][:200]}"
                                        if reader_error else "ran on (stopped to restart it)"))
        healed_at = time.monotonic()
        writer, reader = start_writer(), start_reader()  # from their checkpoints
        writer.processAllAvailable()
        reader.processAllAvailable()
        report.append(f"healed and restarted: caught up in {time.monotonic() - healed_at:.1f}s")

        # 3. a slow link to the commits leader: slower, no failure, no duplicate
        link[COMMITS_LEADER].set("latency", LATENCY_MS)
        slow_at = time.monotonic()
        started = {"w": progress.rows_of(writer), "r": progress.rows_of(reader)}
        feed(2)
        writer.processAllAvailable()
        reader.processAllAvailable()
        slow_s = time.monotonic() - slow_at
        link[COMMITS_LEADER].set("forward")
        # progress events arrive after processAllAvailable returns: wait on them
        progress.wait_until([writer, reader], lambda: progress.rows_of(writer) - started["w"]
                            >= 2 * ROWS_PER_FILE, "the writer's progress of the 2 slow files")
        report.append(f"{LATENCY_MS} ms per chunk to node {COMMITS_LEADER} (commits leader): "
                      f"2 files through in {slow_s:.1f}s ({took:.1f}s with a node cut), "
                      f"{progress.rows_of(writer) - started['w']} rows written and "
                      f"{progress.rows_of(reader) - started['r']} read, no failure")
        for q in (writer, reader):
            assert q.isActive and q.exception() is None, (q.name, q.exception())
        writer.stop()
        reader.stop()

        in_wal = [(r.id, r.payload) for r in spark.read.format("durablewal").options(**wal)
                  .load().select("id", "payload").collect()]
        out = [(r.id, r.payload) for r in spark.read.parquet(str(out_dir))
               .select("id", "payload").collect()]
        n_wal = check_exactly_once(in_wal, files, "WAL")
        n_out = check_exactly_once(out, files, "reader output")
        print("\n" + "\n".join(report) + f"\n{files} files: {n_wal} rows in the WAL and "
              f"{n_out} in the output, each once")
    finally:
        net.set_all("forward")
        for q in (writer, reader):
            if q is not None and q.isActive:
                q.stop()
