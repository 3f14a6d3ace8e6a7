"""Two of three brokers down: a write fails, in bounded time, with a typed error that
names the cause and the brokers; nothing acknowledged before is lost, and once the
brokers are back the same store appends again and a streaming query restarted from
its checkpoint completes exactly once.

With two of three combined KRaft nodes down the controller quorum is lost too, so the
surviving node can neither elect a new leader nor shrink the in-sync replicas: an
append (acks=all, min.insync.replicas=2) cannot be acknowledged, whichever node
survives. Timeouts are small here (``request_timeout_ms=3000``) so the failure comes
within seconds.
"""

from __future__ import annotations

import time
import uuid

import pytest

from pyspark_durable.errors import BackendUnavailable
from pyspark_durable.log import open_store
from pyspark_durable.log.base import Record
from tests.kafka_cluster.kafka_cluster_tools import (
    ROWS_PER_FILE,
    SCHEMA,
    check_exactly_once,
    leader_of,
    partition_info,
    restart_all,
    write_file,
)

pytestmark = [pytest.mark.kafka, pytest.mark.crash]

REQUEST_TIMEOUT_MS = 3000
FAIL_WITHIN_S = 20.0  # an append's bound: max(request, delivery timeout) + 5 s, and slack


def records(tag: str, n: int) -> list[Record]:
    return [Record(f"{tag}-{i}".encode(), f"{tag}-value-{i}".encode()) for i in range(n)]


@pytest.mark.parametrize("client, survivor", [("confluent", "a follower"),
                                              ("kafka-python", "the leader")])
def test_append_with_two_brokers_down_fails_typed_and_recovers(kafka_cluster, client, survivor):
    """This tests that with two of three brokers killed an append on either Kafka client
    fails within a bounded time with BackendUnavailable naming the unavailable brokers
    and the in-sync replica rule, that the acknowledged entries are all still there, and
    that the same store appends again once the brokers are back (an idempotent
    producer whose batch expired must not wait forever: KafkaPythonSender replaces it)."""
    cluster = kafka_cluster
    namespace = f"d{uuid.uuid4().hex[:10]}"
    # librdkafka reports a timed-out delivery ~3 s after message.timeout.ms: kept short,
    # so its typed report comes before the append's own bound (delivery timeout + 5 s)
    extra = {"message_timeout_ms": 1500} if client == "confluent" else {}
    before = records("before", 50)
    # the namespace and the acknowledged entries are written with the default timeouts:
    # right after the previous test restarted nodes, leaders may still be moving
    with open_store("kafka", namespace, bootstrap_servers=cluster.bootstrap, client=client,
                    replication_factor=3, min_insync_replicas=2) as setup:
        assert setup.open_log("region_0").append(before) == list(range(50))
    store = open_store("kafka", namespace, bootstrap_servers=cluster.bootstrap, client=client,
                       replication_factor=3, min_insync_replicas=2,
                       request_timeout_ms=REQUEST_TIMEOUT_MS, connect_timeout_ms=3000, **extra)
    try:
        log = store.open_log("region_0")
        topic = f"{namespace}_region_0"
        leader, replicas, isr = partition_info(cluster, topic)
        assert sorted(replicas) == sorted(isr) == [1, 2, 3], (replicas, isr)
        if survivor == "the leader":
            victims = [n for n in replicas if n != leader]
        else:
            victims = [leader, next(n for n in replicas if n != leader)]
        for node_id in victims:
            cluster.kill(node_id)
        addresses = [cluster.node(n).address for n in victims]

        started = time.monotonic()
        with pytest.raises(BackendUnavailable) as failure:
            log.append(records("during", 20))
        took = time.monotonic() - started
        message = str(failure.value)
        print(f"\n{client}, {survivor} left, failed after {took:.1f}s: {message}")
        assert took < FAIL_WITHIN_S, f"the append failed only after {took:.1f}s"
        assert failure.value.retriable
        assert "2 of 3 Kafka brokers unavailable" in message, message
        for address in addresses:
            assert address in message, f"{address} is not named: {message}"
        assert "min.insync.replicas" in message, message
        assert f"namespace={namespace}" in message and topic in message, message

        restart_all(cluster, victims, prefix=namespace)  # 'back': leaders elected again
        after = records("after", 30)
        offsets = log.append(after)  # the same store, the same producer
        # checked through a store with default timeouts: a 3 s read right after the
        # restart may still meet a node catching up (a retriable error, not the claim here)
        with open_store("kafka", namespace, bootstrap_servers=cluster.bootstrap,
                        client=client) as check:
            entries = list(check.open_log("region_0").read(0))
        values = [e.value for e in entries]
        assert values[:50] == [r.value for r in before], "an acknowledged entry was lost"
        assert [e.offset for e in entries] == list(range(len(entries)))
        assert [values[o] for o in offsets] == [r.value for r in after]
        middle = values[50:offsets[0]]  # the failed append's entries: stored or not, once
        assert middle in ([], [r.value for r in records("during", 20)]), middle
        assert len(values) == 50 + len(middle) + 30
        print(f"{len(entries)} entries after the brokers returned: 50 acknowledged before, "
              f"{len(middle)} of the failed append, 30 after")
    finally:
        store.close()


@pytest.mark.spark
def test_streaming_write_with_two_brokers_down_fails_then_restarts_exactly_once(
        spark, kafka_cluster, progress, tmp_path):
    """This tests that a streaming durablewal writer (confluent client) whose brokers are
    two of three down fails with BackendUnavailable naming the unavailable brokers within
    a bounded time, and that, restarted from its checkpoint after the brokers returned,
    it completes with every input row in the WAL exactly once."""
    cluster = kafka_cluster
    namespace = f"s{uuid.uuid4().hex[:10]}"
    wal = {"namespace": namespace, "backend": "kafka",
           "kafka.bootstrap.servers": cluster.bootstrap, "kafka.client": "confluent",
           "kafka.replication.factor": "3", "kafka.min.insync.replicas": "2",
           "kafka.request.timeout.ms": str(REQUEST_TIMEOUT_MS),
           "kafka.connect.timeout.ms": "3000"}
    in_dir, ckpt = tmp_path / "in", tmp_path / "ckpt"

    def start():
        return (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                .json(str(in_dir))
                .writeStream.format("durablewal").options(**wal)
                .option("checkpointLocation", str(ckpt))
                .queryName("json-to-wal-two-down").trigger(processingTime="500 milliseconds")
                .start())

    def wal_rows() -> list[tuple[int, str]]:
        return [(r.id, r.payload) for r in spark.read.format("durablewal").options(**wal)
                .load().select("id", "payload").collect()]

    for k in range(2):
        write_file(in_dir, k)
    writer = start()
    try:
        progress.wait_until([writer], lambda: progress.rows_of(writer) >= 2 * ROWS_PER_FILE,
                            "the first two files in the WAL")
        acknowledged = check_exactly_once(wal_rows(), 2, "WAL before the kills")
        commits, region = f"{namespace}_commits", f"{namespace}_region_0"
        victims = [leader_of(cluster, region)]
        victims.append(leader_of(cluster, commits) if leader_of(cluster, commits) != victims[0]
                       else next(n.node_id for n in cluster.nodes if n.node_id != victims[0]))
        for node_id in victims:
            cluster.kill(node_id)
        addresses = [cluster.node(n).address for n in victims]
        killed_at = time.monotonic()
        write_file(in_dir, 2)
        error = progress.wait_terminated(writer)
        took = time.monotonic() - killed_at
        print(f"\nthe writer failed {took:.0f}s after nodes {victims} were killed: "
              f"{(error or '')[:600]}")
        assert error is not None, "the writer stopped without an error"
        assert "BackendUnavailable" in error, error[:3000]
        assert "2 of 3 Kafka brokers unavailable" in error, error[:3000]
        for address in addresses:
            assert address in error, f"{address} is not named: {error[:3000]}"
        # each of Spark's task attempts fails within one append's bound
        assert took < 120, f"the writer failed only after {took:.0f}s"
    finally:
        if writer.isActive:
            writer.stop()

    restart_all(cluster, victims, prefix=namespace)
    assert check_exactly_once(wal_rows(), 2, "WAL after the failure") == acknowledged
    write_file(in_dir, 3)
    writer = start()  # from the checkpoint: the failed batch again, then the next file
    try:
        writer.processAllAvailable()
        assert writer.exception() is None
    finally:
        writer.stop()
    rows = check_exactly_once(wal_rows(), 4, "WAL after the restart")
    print(f"{rows} rows in the WAL, each once; {acknowledged} were acknowledged before "
          f"nodes {victims} went down")
