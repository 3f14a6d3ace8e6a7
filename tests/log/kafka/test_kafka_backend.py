"""Kafka-only behaviour of the log layer, against the Apache Kafka broker the suite
starts, with each client: confluent-kafka (librdkafka) and kafka-python."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from pyspark_durable.errors import BackendUnavailable, ConfigError, LogNotFound, OffsetOutOfRange
from pyspark_durable.log import Record, open_store
from pyspark_durable.log.kafka.confluent import reader as reader_module
from pyspark_durable.log.kafka.settings import FORBIDDEN
from pyspark_durable.log.kafka.store import KafkaLogStore
from tests.helpers import CHILDREN, ROOT, wait_until
from tests.kafka_broker import kill_broker, start_broker, stop_broker

pytestmark = pytest.mark.kafka


@pytest.fixture
def make_kafka(kafka_broker, namespace, client):
    opened = []

    def make(ns: str | None = None, **options) -> KafkaLogStore:
        store = open_store("kafka", ns or namespace, bootstrap_servers=kafka_broker,
                           client=client, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def describe(broker: str, topics: list[str]) -> dict[str, int]:
    admin = KafkaAdminClient(bootstrap_servers=broker)
    try:
        return {t["name"]: len(t["partitions"]) for t in admin.describe_topics(topics)}
    finally:
        admin.close()


def create_topic(broker: str, topic: str, partitions: int) -> None:
    """A topic made by hand, with the broker's defaults (as an operator would)."""
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1)])
    finally:
        admin.close()


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_topics_have_one_partition_and_expected_names(make_kafka, kafka_broker, namespace):
    """This tests that logs and snapshots map to single-partition topics {namespace}_{log}."""
    store = make_kafka()
    store.open_region(0).append([Record(b"k", b"v")])
    store.open_log("commits")
    store.write_snapshot("meta", 0, b"m")
    names = [f"{namespace}_region_0", f"{namespace}_commits", f"{namespace}_snapshots"]
    assert describe(kafka_broker, names) == dict.fromkeys(names, 1)
    assert store.list_logs() == ["commits", "region_0"]


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_namespace_prefix_of_another_is_not_confused(make_kafka, kafka_broker, namespace):
    """This tests that namespace a does not list the logs of namespace a_b, and both are listed."""
    make_kafka(namespace).open_region(1)
    make_kafka(f"{namespace}_b").open_log("commits")
    assert make_kafka(namespace).list_logs() == ["region_1"]
    assert make_kafka(f"{namespace}_b").list_logs() == ["commits"]
    found = KafkaLogStore.list_namespaces({"kafka.bootstrap.servers": kafka_broker})
    assert {namespace, f"{namespace}_b"} <= set(found)
    with pytest.raises(ConfigError, match="reserved"):
        make_kafka().open_log("x_snapshots")


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_existing_multi_partition_topic_is_refused(make_kafka, kafka_broker, namespace):
    """This tests that a log topic made with several partitions (by hand, or auto-created
    by a broker whose num.partitions is above 1) and holding records is an error, not used."""

    topic = f"{namespace}_region_5"
    create_topic(kafka_broker, topic, 3)
    producer = KafkaProducer(bootstrap_servers=kafka_broker)
    producer.send(topic, b"someone else's record", partition=2).get(timeout=10)
    producer.close()
    with pytest.raises(ConfigError, match="has 3 partitions; a log needs exactly 1"):
        make_kafka().open_region(5)
    assert describe(kafka_broker, [topic]) == {topic: 3}  # left as it was


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_auto_created_topic_with_broker_retention_is_refused_or_fixed(
        make_kafka, kafka_broker, namespace, caplog):
    """This tests that a topic with Kafka's default 7-day retention (auto-created by a
    produce, as a broker with auto.create.topics.enable does) is refused for writing when
    it holds records, naming the setting and the fix, while reading it still works; and
    that an empty one, made by hand with the broker's defaults, gets the WAL's settings."""

    held = f"{namespace}_region_7"
    producer = KafkaProducer(bootstrap_servers=kafka_broker)
    producer.send(held, b"auto-created").get(timeout=10)  # auto-creates it: 1 partition
    producer.close()
    store = make_kafka()
    with pytest.raises(ConfigError, match=r"has retention\.ms=604800000: the broker would "
                                          r"delete WAL records on its own") as info:
        store.open_region(7)
    assert f"--entity-name {held} --add-config retention.ms=-1" in str(info.value)
    assert [e.value for e in store.open_region(7, create=False).read(0)] == [b"auto-created"]

    empty = f"{namespace}_region_8"
    create_topic(kafka_broker, empty, 1)
    with caplog.at_level(logging.WARNING, logger="pyspark_durable.log.kafka.topics"):
        assert store.open_region(8).append([Record(b"k", b"v")]) == [0]
    assert any("is empty and has retention.ms=604800000" in r.getMessage() for r in caplog.records)
    assert store.admin.topic_configs(empty, ("retention.ms", "retention.bytes")) == {
        "retention.ms": "-1", "retention.bytes": "-1"}


@pytest.mark.parametrize("setting", ["retention.ms=86400000", "retention.bytes=1048576",
                                     "cleanup.policy=compact"])
@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_operator_changed_retention_is_refused_for_writing(make_kafka, kafka_broker, namespace,
                                                           setting, client):
    """This tests that a region topic of a live WAL whose broker-side retention an operator
    changed is a typed error when the namespace is opened for writing again, and that
    the snapshots topic turned to a deleting policy is one too; readers still read."""
    from kafka.admin import ConfigResource, ConfigResourceType

    store = make_kafka()
    store.open_region(0).append([Record(b"k", b"v")])
    store.write_snapshot("meta", 0, b"m")
    name, value = setting.split("=")
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, f"{namespace}_region_0",
                                            configs={name: value})], incremental=True)
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, f"{namespace}_snapshots",
                                            configs={"cleanup.policy": "delete",
                                                     "retention.ms": "3600000"})],
                            incremental=True)
    finally:
        admin.close()
    fresh = make_kafka()
    with pytest.raises(ConfigError, match=f"topic '{namespace}_region_0' .* has {setting}"):
        fresh.open_region(0)
    with pytest.raises(ConfigError, match=f"topic '{namespace}_snapshots' .* has retention.ms"):
        fresh.write_snapshot("meta", 1, b"m")
    assert [e.value for e in fresh.open_region(0, create=False).read(0)] == [b"v"]
    problems = dict(fresh.settings_problems())
    assert setting in problems["region_0"] and "retention.ms=3600000" in problems["snapshots"]


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_empty_auto_created_topic_is_replaced(make_kafka, kafka_broker, namespace):
    """This tests that an EMPTY topic a broker auto-created with several partitions (a stale
    client asked for a deleted topic) is replaced by a 1-partition topic when the log is
    opened for writing, and the log then works; opening it read-only still refuses it."""

    topic = f"{namespace}_region_6"
    create_topic(kafka_broker, topic, 4)
    with pytest.raises(ConfigError, match="has 4 partitions"):
        make_kafka().open_log("region_6", create=False)
    log = make_kafka().open_region(6)
    assert describe(kafka_broker, [topic]) == {topic: 1}
    assert log.append([Record(b"k", b"v")]) == [0]


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_high_watermark_seen_by_fresh_and_old_handles(make_kafka, kafka_broker):
    """This tests that a fresh store learns the true end of a log written in one batch
    (ListOffsets), and a handle that knew an older end sees what another writer added."""
    make_kafka().open_region(0).append([Record(b"k%d" % i, b"v") for i in range(10)])
    fresh = make_kafka().open_region(0, create=False)
    assert fresh.high_watermark() == 10
    assert [e.offset for e in fresh.read(0)] == list(range(10))
    assert [e.offset for e in fresh.read(9)] == [9]
    # another writer appends: a reader that knew the old end still sees the new one
    make_kafka().open_region(0).append([Record(b"late", b"v")] * 3)
    assert [e.offset for e in fresh.read(8, 9)] == [8]
    assert [e.offset for e in fresh.read(9)] == [9, 10, 11, 12]
    assert fresh.high_watermark() == 13


@pytest.mark.parametrize("option", sorted(FORBIDDEN))
@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_forbidden_options_are_refused(kafka_broker, namespace, option, client):
    """This tests that options breaking the guarantees are refused, naming the option."""
    with pytest.raises(ConfigError, match=f"'{option}' cannot be set"):
        KafkaLogStore(namespace, client=client, bootstrap_servers=kafka_broker, **{option: "x"})
    dotted = "kafka." + option.replace("_", ".")
    with pytest.raises(ConfigError, match=f"'{dotted}' cannot be set"):
        KafkaLogStore(namespace, client=client, **{"kafka.bootstrap.servers": kafka_broker, dotted: "x"})


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_unknown_options_list_valid_ones(kafka_broker, namespace, client):
    """This tests that an unknown option is refused naming it, with the valid option names
    (kafka-python: all of them; librdkafka names the property it does not know)."""
    with pytest.raises(ConfigError, match=r"no\.such") as info:
        KafkaLogStore(namespace, client=client, bootstrap_servers=kafka_broker,
                      **{"kafka.no.such": 1})
    if client == "kafka-python":
        assert "unknown kafka backend option 'kafka.no.such'" in str(info.value)
        for valid in ("bootstrap_servers", "connect_timeout_ms", "linger_ms", "max_poll_records"):
            assert valid in str(info.value)
        assert "'acks'" not in str(info.value).split("valid")[1]
    else:
        assert "No such configuration property" in str(info.value)
        for valid in ("bootstrap_servers", "connect_timeout_ms", "topic_config", "client"):
            assert valid in str(info.value)
    with pytest.raises(ConfigError, match="needs bootstrap_servers"):
        KafkaLogStore(namespace, client=client)
    with pytest.raises(ConfigError, match="given twice"):
        KafkaLogStore(namespace, client=client, bootstrap_servers=kafka_broker,
                      **{"kafka.bootstrap.servers": kafka_broker})
    with pytest.raises(ConfigError, match=r"linger\.ms"):
        KafkaLogStore(namespace, client=client, bootstrap_servers=kafka_broker,
                      **{"kafka.linger.ms": "soon"})
    with pytest.raises(ConfigError, match="client='fastest' is invalid; valid: kafka-python, confluent"):
        KafkaLogStore(namespace, client="fastest", bootstrap_servers=kafka_broker)


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_option_spellings_and_string_values(make_kafka, namespace, client):
    """This tests that kafka.-prefixed, dotted and string-valued options (Spark style) work,
    on both clients (kafka-python names are translated for librdkafka)."""
    store = make_kafka(**{"kafka.linger.ms": "2", "kafka.compression.type": "gzip",
                          "connect_timeout_ms": "5000", "fetch_max_wait_ms": "7"})
    assert store.settings.client == client
    consumer = store.settings.clients["consumer"]
    if client == "kafka-python":
        assert store.settings.clients["producer"]["linger_ms"] == 2
        assert consumer["fetch_max_wait_ms"] == 7
    else:
        assert store.settings.clients["producer"]["linger.ms"] == "2"
        assert consumer["fetch.wait.max.ms"] == "7"  # kafka-python's name, translated
        assert store.settings.clients["producer"]["acks"] == "all"
        assert store.settings.clients["producer"]["enable.idempotence"] == "true"
        assert consumer["auto.offset.reset"] == "error"
    assert store.settings.connect_timeout_ms == 5000
    log = store.open_region(0)
    assert log.append([Record(b"k", b"x" * 1000)] * 3) == [0, 1, 2]
    assert [e.value for e in log.read(0)] == [b"x" * 1000] * 3


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_unreachable_bootstrap_fails_in_bounded_time(namespace, client):
    """This tests that a closed port fails within connect_timeout_ms, naming the address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    address = f"127.0.0.1:{port}"
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match=address) as info:
        KafkaLogStore(namespace, client=client, bootstrap_servers=address, connect_timeout_ms=1500)
    elapsed = time.monotonic() - start
    assert elapsed < 1.5 + 1.5, elapsed
    assert info.value.retriable
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match=address):
        KafkaLogStore.list_namespaces({"bootstrap_servers": address, "connect_timeout_ms": 500,
                                        "client": client})
    assert time.monotonic() - start < 0.5 + 1.5


def _partition_bytes(cluster, topic: str) -> int:
    """Bytes of the topic's partition folder on the (single) broker's disk."""
    folder = cluster.nodes[0].folder / "data" / f"{topic}-0"
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix == ".log")


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_delete_records_moves_the_log_start_and_frees_segments(make_kafka, kafka_cluster,
                                                              namespace, client):
    """This tests that delete_before runs DeleteRecords on Apache Kafka: the broker's log
    start offset moves (a raw consumer seeking below it is refused), every store honours
    it, and the broker removes the segments below it from disk on its own schedule."""
    store = make_kafka(topic_config={"segment.bytes": str(1 << 20)})  # small segments
    log = store.open_region(3)
    topic = f"{namespace}_region_3"
    for _ in range(10):  # 10 x 25 x 20 kB = 5 MB: about 5 segments (values that differ:
        # a compressed batch of one repeated value would hold about one of them)
        log.append([Record(b"k", os.urandom(20_000)) for _ in range(25)])
    before = _partition_bytes(kafka_cluster, topic)
    log.delete_before(200)
    other = make_kafka().open_region(3, create=False)
    assert (other.low_watermark(), other.high_watermark()) == (200, 250)
    with pytest.raises(OffsetOutOfRange, match="below the low watermark 200"):
        other.read(199)
    assert [e.offset for e in other.read(200)] == list(range(200, 250))
    consumer = KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    assert consumer.beginning_offsets([tp])[tp] == 200  # the broker's own log start offset
    consumer.close()
    # the broker's retention thread runs every second here: nothing to wait on but its disk
    wait_until(lambda: _partition_bytes(kafka_cluster, topic) <= before * 0.4,
               f"the broker to free 60% of {before} bytes below the DeleteRecords point",
               60, interval_s=0.5)
    after = _partition_bytes(kafka_cluster, topic)
    print(f"DeleteRecords below 200 of 250 entries: {before} -> {after} bytes on disk")
    assert after <= before * 0.4, (before, after)


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_logical_low_watermark_when_delete_records_is_refused(make_kafka, kafka_broker, caplog):
    """This tests that where DeleteRecords is not available (Kafka-protocol services
    without it) no store reads below the low watermark: the logical low watermark is
    kept in the snapshots topic, a store opened later honours it, and the warning
    appears once per store."""
    store = make_kafka()
    store.admin.delete_records = lambda topic, offset: False  # the service refuses it
    log = store.open_region(3)
    log.append([Record(b"k%d" % i, b"v%d" % i) for i in range(20)])
    with caplog.at_level(logging.WARNING, logger="pyspark_durable.log.kafka"):
        log.delete_before(7)
        log.delete_before(12)
    warnings = [r for r in caplog.records if "DeleteRecords" in r.getMessage()]
    assert len(warnings) == 1 and kafka_broker in warnings[0].getMessage()

    other = make_kafka().open_region(3, create=False)
    assert (other.low_watermark(), other.high_watermark()) == (12, 20)
    with pytest.raises(OffsetOutOfRange, match="below the low watermark 12"):
        other.read(11)
    assert [e.key for e in other.read(12)] == [b"k%d" % i for i in range(12, 20)]
    other.delete_before(15)  # by a store whose DeleteRecords works: seen by the first too
    with pytest.raises(OffsetOutOfRange, match="below the low watermark 15"):
        log.read(12)


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_snapshots_topic_is_compacted_for_real(make_kafka, kafka_broker, namespace):
    """This tests that deleted snapshot versions are tombstones that Kafka's log cleaner
    removes from the compacted snapshots topic, and that a store opened after compaction
    still finds the newest snapshot, the log registry and the low watermarks."""
    from kafka.admin import ConfigResource, ConfigResourceType

    store = make_kafka()
    log = store.open_region(0)
    log.append([Record(b"k", b"v")] * 5)
    log.delete_before(2)
    for version in range(30):
        store.write_snapshot("wal", version, b"state %d" % version)
        store.prune_snapshots("wal", keep=2)
    topic = f"{namespace}_snapshots"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker)
    try:  # roll segments at once and clean eagerly, so the cleaner acts within seconds
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0", "min.compaction.lag.ms": "0"})], incremental=True)
    finally:
        admin.close()

    def raw_keys() -> list[bytes]:
        consumer = KafkaConsumer(bootstrap_servers=kafka_broker, enable_auto_commit=False,
                                 consumer_timeout_ms=2000)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        keys = []
        for record in consumer:
            keys.append(record.key)
            if record.offset >= end - 1:
                break
        consumer.close()
        return keys

    written = len(raw_keys())

    def compacted() -> bool:  # the broker's log cleaner: nothing to wait on but the topic
        store.write_snapshot("wal", 1000 + int(time.monotonic()), b"tick")  # rolls a segment
        store.prune_snapshots("wal", keep=2)
        return len(raw_keys()) < written // 2

    wait_until(compacted, f"the log cleaner to compact {written} snapshot keys to half",
               90, interval_s=1.0)
    fresh = make_kafka()
    versions = fresh.snapshot_versions("wal")
    assert len(versions) == 2 and versions[-1] >= 1000
    assert fresh.read_snapshot("wal")[0] == versions[-1]
    assert fresh.list_logs() == ["region_0"]
    assert fresh.open_region(0, create=False).low_watermark() == 2


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_headers_and_2mb_values_round_trip(make_kafka):
    """This tests that binary headers (also empty) and 2 MB values come back byte for byte."""
    log = make_kafka().open_region(0)
    big = os.urandom(2 << 20)
    headers = (("step", (42).to_bytes(8, "big")), ("writer", "w-ü".encode()), ("empty", b""))
    records = [
        Record(b"\x00" * 26, big, headers), Record(b"", b"", ()), Record(b"k", big[:10], headers)
    ]
    assert log.append(records) == [0, 1, 2]
    got = list(log.read(0))
    assert [(e.key, e.value, e.headers) for e in got] == [
        (r.key, r.value, r.headers) for r in records
    ]


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_broker_going_away_mid_read_is_retriable(tmp_path, caplog, client):
    """This tests that a broker killed mid-read is a retriable error, not a short read or hang."""
    broker = start_broker(tmp_path / "private-kafka")
    namespace = f"t{uuid.uuid4().hex[:12]}"
    total = 200
    # written with the client's usual timeouts: a loaded machine's broker may take
    # seconds to create a topic or take 5 MB, which is no part of what is tested
    writer = KafkaLogStore(namespace, client=client, bootstrap_servers=broker.address)
    try:
        region = writer.open_region(0)
        for _ in range(4):
            region.append([Record(b"k", os.urandom(100_000)) for _ in range(total // 4)])
    except BaseException:
        stop_broker(broker)
        raise
    finally:
        writer.close()
    store = KafkaLogStore(
        namespace, client=client, bootstrap_servers=broker.address, request_timeout_ms=1500,
        connect_timeout_ms=1500, **{"kafka.max.partition.fetch.bytes": 64 << 10,
                                    "kafka.fetch.max.bytes": 64 << 10, "batch_size": 64 << 10},
    )
    try:
        log = store.open_region(0, create=False)
        reader = log.read(0)
        seen = [next(reader).offset for _ in range(3)]
        kill_broker(broker)
        start = time.monotonic()
        with caplog.at_level(logging.CRITICAL, logger="kafka"):
            with pytest.raises(BackendUnavailable, match=broker.address) as info:
                seen += [e.offset for e in reader]
            elapsed = time.monotonic() - start
            assert info.value.retriable
            assert seen == list(range(len(seen))) and len(seen) < total
            assert elapsed < 1.5 + 3.0, elapsed
            start = time.monotonic()
            with pytest.raises(BackendUnavailable, match=broker.address):
                log.append([Record(b"k", b"after the broker died")])
            assert time.monotonic() - start < 1.5 + 1.5 + 5.0
    finally:
        store.close()
        stop_broker(broker)


@pytest.mark.parametrize("compression", ["default", "none"])
def test_each_client_reads_what_the_other_wrote(kafka_broker, namespace, compression):
    """This tests that a log written with one client reads back identically with the other
    (offsets, keys, values, headers), both ways, so a deployment can switch clients; with
    values lz4 can shrink, so confluent's default lz4 batches reach kafka-python's reader
    compressed (librdkafka sends a batch that does not shrink as it is)."""
    opened = []
    options = {} if compression == "default" else {"compression.type": compression}

    def store(client: str) -> KafkaLogStore:
        opened.append(open_store("kafka", namespace, bootstrap_servers=kafka_broker,
                                 client=client, **(options if client == "confluent" else {})))
        return opened[-1]

    try:
        records = [Record(b"k%d" % i, os.urandom(50 + i) + b"x" * 500, (("h", b"%d" % i),))
                   for i in range(30)]
        assert store("kafka-python").open_region(0).append(records[:15]) == list(range(15))
        assert store("confluent").open_region(0).append(records[15:]) == list(range(15, 30))
        for client in ("confluent", "kafka-python"):
            log = store(client).open_region(0, create=False)
            got = list(log.read(0))
            assert [(e.offset, e.key, e.value, e.headers) for e in got] == [
                (i, r.key, r.value, r.headers) for i, r in enumerate(records)], client
            assert log.high_watermark() == 30
    finally:
        for s in opened:
            s.close()


def test_a_recreated_topic_is_a_typed_error_on_both_clients(kafka_broker):
    """This tests that a store whose topics are deleted, and one of them created again with
    4 partitions, fails with a typed error or reads on both clients, in a process that
    survives (a crash of the client library here would take the Spark worker with it)."""
    child = str(CHILDREN / "kafka_deleted_child.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for client in ("kafka-python", "confluent"):
        done = subprocess.run([sys.executable, child, kafka_broker, client, "4"], env=env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, (client, done.returncode, done.stdout, done.stderr[-3000:])
        lines = done.stdout.splitlines()
        assert lines[0] == "DELETED", done.stdout
        assert lines[1].startswith("ERROR "), (client, done.stdout)
        assert lines[1].split()[1] in ("BackendUnavailable", "LogNotFound", "DataLoss",
                                       "OffsetOutOfRange", "ConfigError"), (client, done.stdout)


def test_confluent_client_never_imports_kafka_python(kafka_broker, namespace):
    """This tests that a process on the confluent client (a Spark worker reading or writing
    a WAL) never imports kafka-python: the import costs ~0.25 s in every Python process
    Spark starts for a streaming source, on a restart's critical path."""
    code = f"""
import sys
from pyspark_durable.endpoint import open_namespace, write_step, read_steps
import pyarrow as pa
import pyspark_durable.spark.datasource
cfg = {{"backend": "kafka", "namespace": {namespace!r},
        "options": {{"bootstrap_servers": {kafka_broker!r}, "client": "confluent",
                    "linger.ms": "1"}}}}
ns = open_namespace(cfg)
write_step(ns, "w", 0, {{"t": pa.table({{"id": [1, 2, 3]}})}})
assert read_steps(ns, "t", with_metadata=False).column("id").to_pylist() == [1, 2, 3]
ns.close()
print("KAFKA-PYTHON", "kafka" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "KAFKA-PYTHON False" in done.stdout, done.stdout


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_replication_options_and_retention_overrides(kafka_broker, namespace, client):
    """This tests that kafka.replication.factor and kafka.min.insync.replicas reach the
    topics the WAL creates (checked against a 1-node broker: factor 1), that invalid
    values are typed errors, and that a topic_config overriding retention is refused."""
    store = KafkaLogStore(namespace, client=client, bootstrap_servers=kafka_broker,
                          **{"kafka.replication.factor": "1", "kafka.min.insync.replicas": "1"})
    try:
        store.open_region(0).append([Record(b"k", b"v")])
        assert store.admin.topic_configs(f"{namespace}_region_0", ("min.insync.replicas",)) == {
            "min.insync.replicas": "1"}
    finally:
        store.close()
    for bad, match in (({"kafka.replication.factor": "0"}, "replication_factor=0 is invalid"),
                       ({"kafka.min.insync.replicas": "two"}, "is not an integer"),
                       ({"topic_config": {"retention.ms": "1000"}}, r"\['retention.ms'\] cannot")):
        with pytest.raises(ConfigError, match=match):
            KafkaLogStore(namespace, client=client, bootstrap_servers=kafka_broker, **bad)


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_vanished_topic_is_never_created_again_by_a_handle(make_kafka, kafka_broker, namespace,
                                                             client):
    """This tests that a log handle whose topic was deleted under it fails to read and to
    append with typed errors and never makes the topic again, although the broker
    auto-creates topics (kafka-python 3.0.12 ignores allow_auto_create_topics=False in
    its metadata requests: kafka_python.config.no_auto_create)."""
    from pyspark_durable.errors import DurableWalError

    log = make_kafka(request_timeout_ms=3000).open_region(0)
    log.append([Record(b"k", b"v")])
    assert [e.value for e in log.read(0)] == [b"v"]
    topic = f"{namespace}_region_0"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker)
    try:
        admin.delete_topics([topic])
        # deletion completes asynchronously
        wait_until(lambda: topic not in admin.list_topics(), f"{topic} to be deleted", 60,
                   interval_s=0.1)
        with pytest.raises(DurableWalError):
            list(log.read(0))
        with pytest.raises(DurableWalError):
            log.append([Record(b"k", b"after the topic was deleted")])
        assert topic not in admin.list_topics()
    finally:
        admin.close()


class LaggingReader:
    """A Reader (log/kafka/api.py) over a broker whose view lags an acknowledgement, as on a
    cluster right after a leader change: for a topic in ``lag["ends"]``, the next
    ``lag["stale"]`` watermark answers end there, and the next ``lag["early"]`` fetches
    return nothing."""

    def __init__(self, inner, topic: str, lag: dict) -> None:
        self.inner, self.topic, self.lag = inner, topic, lag

    def watermarks(self) -> tuple[int, int]:
        begin, high = self.inner.watermarks()
        end = self.lag["ends"].get(self.topic)
        if end is not None and self.lag["stale"] > 0:
            self.lag["stale"] -= 1
            return begin, min(high, end)
        return begin, high

    def fetch(self, max_records, timeout_ms):
        if self.topic in self.lag["ends"] and self.lag["early"] > 0:
            self.lag["early"] -= 1
            return []
        return self.inner.fetch(max_records, timeout_ms)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def with_readers(store: KafkaLogStore, wrap) -> KafkaLogStore:
    """``store`` whose every new reader of a topic is ``wrap(reader, topic)``."""
    new_reader = store.pool.new_reader
    store.pool.new_reader = lambda topic, where: wrap(new_reader(topic, where), topic)
    return store


def lagging(store: KafkaLogStore, lag: dict) -> KafkaLogStore:
    """``store`` whose readers see the broker through :class:`LaggingReader`."""
    return with_readers(store, lambda reader, topic: LaggingReader(reader, topic, lag))


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_an_acknowledged_range_is_read_past_a_stale_high_watermark(make_kafka):
    """This tests that a reader whose view of a log's end is stale (its own cached end,
    then a broker answering the old end and a fetch ending early) still reads every entry
    of a range another process had acknowledged, where a plain read stops at the view."""
    writer = make_kafka().open_region(0)
    writer.append([Record(b"k%d" % i, b"v") for i in range(10)])
    lag = {"ends": {writer.topic: 10}, "stale": 0, "early": 0}
    region = lagging(make_kafka(), lag).open_region(0, create=False)
    assert [e.offset for e in region.read(0)] == list(range(10))  # the handle knows 10
    writer.append([Record(b"late%d" % i, b"v") for i in range(5)])  # acknowledged: 10..14
    lag.update(stale=1)
    assert [e.offset for e in region.read(8, 15)] == [8, 9]  # read() clamps to its view
    lag.update(stale=3, early=1)
    got = list(region.read_acknowledged(8, 15))
    assert [(e.offset, e.key) for e in got] == [(8, b"k8"), (9, b"k9")] + [
        (10 + i, b"late%d" % i) for i in range(5)]
    assert (lag["stale"], lag["early"]) == (0, 0)  # every stale answer was given


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_an_acknowledged_end_never_reached_names_the_high_watermark(make_kafka):
    """This tests that when the broker's end stays below a range the caller knows was
    acknowledged, the read fails within request_timeout_ms with a retriable
    BackendUnavailable naming both ends, never a short read."""
    writer = make_kafka().open_region(0)
    writer.append([Record(b"k", b"v")] * 10)
    lag = {"ends": {writer.topic: 10}, "stale": 10**9, "early": 0}
    region = lagging(make_kafka(request_timeout_ms=1000), lag).open_region(0, create=False)
    writer.append([Record(b"late", b"v")] * 5)
    start = time.monotonic()
    with pytest.raises(BackendUnavailable,
                       match=r"stays at 10, below the end 15 of acknowledged entries") as info:
        list(region.read_acknowledged(0, 15))
    assert info.value.retriable
    assert 1.0 <= time.monotonic() - start < 1.0 + 3.0
    writer.delete_before(2)
    start = time.monotonic()
    with pytest.raises(OffsetOutOfRange, match="below the low watermark"):
        list(region.read_acknowledged(0, 15))  # deleted: at once, no wait
    assert time.monotonic() - start < 1.0


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_idle_readers_are_bounded_per_store_whatever_the_regions(make_kafka):
    """This tests that reading 12 region logs one after another leaves at most
    IDLE_READERS readers open in the store (the rest closed), that a log read again and
    again keeps its one reader (it is not evicted by its own returns), and that every
    read returns its entries."""
    from pyspark_durable.log.kafka.pool import IDLE_READERS

    store = make_kafka()
    regions = [store.open_region(r) for r in range(12)]
    for r, region in enumerate(regions):
        region.append([Record(b"k", f"v{r}".encode())])
    for r, region in enumerate(regions):
        assert [e.value for e in region.read(0)] == [f"v{r}".encode()]
        assert store.pool.idle_readers() <= IDLE_READERS
    assert 1 <= store.pool.idle_readers() <= IDLE_READERS  # unbounded, it would be 12
    (kept,) = store.pool.idle(regions[-1].topic)
    for _ in range(2 * IDLE_READERS):
        assert [e.value for e in regions[-1].read(0)] == [b"v11"]
    assert store.pool.idle(regions[-1].topic) == [kept]


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_handle_follows_a_recreated_wal_whose_old_snapshots_are_gone(kafka_broker, namespace,
                                                                       client):
    """This tests a long-lived handle on a Kafka WAL whose topics were all deleted and made
    again (a new incarnation) after a cleaner pass had written a snapshot: the handle
    raises IncarnationMismatch naming both incarnations once, then follows the new WAL,
    its steps and rows, and never recovers from the old incarnation's snapshot (its
    store's reset forgets the registry it had read)."""
    from pyspark_durable.endpoint import open_namespace, read_steps, write_step
    from pyspark_durable.errors import IncarnationMismatch
    from pyspark_durable.wal import Cleaner

    cfg = {"backend": "kafka", "namespace": namespace,
           "options": {"bootstrap_servers": kafka_broker, "client": client}}
    ns = open_namespace(cfg)
    for ws in range(3):
        write_step(ns, "w", ws, {"t": [{"id": ws}]})
    Cleaner(ns, grace_ms=0).run_once()  # a snapshot as of the old log's end
    old = ns.info.incarnation
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker)
    try:
        topics = [t for t in admin.list_topics() if t.startswith(f"{namespace}_")]
        assert len(topics) >= 3
        admin.delete_topics(topics)
    finally:
        admin.close()
    fresh = None
    for _ in range(5):  # a stale client may auto-create a deleted topic meanwhile
        try:
            fresh = open_namespace(cfg)
            break
        except ConfigError as exc:
            assert "partitions" in str(exc), exc
    assert fresh is not None
    write_step(fresh, "x", 0, {"t": [{"id": 100}]})
    try:
        with pytest.raises(IncarnationMismatch, match=f"this handle knew incarnation {old}; "
                                                      f"the WAL now is incarnation "
                                                      f"{fresh.info.incarnation}"):
            ns.steps()
        assert ns.steps() == range(0, 1)
        assert read_steps(ns, "t").column("id").to_pylist() == [100]
    finally:
        fresh.close()
        ns.close()


class UnknownAtFirst:
    """A librdkafka consumer that does not know the partition yet, as one that asked a
    broker the new topic's metadata has not reached: its next ``misses["left"]``
    watermark requests fail with _UNKNOWN_PARTITION."""

    def __init__(self, inner, misses: dict) -> None:
        self.inner, self.misses = inner, misses

    def get_watermark_offsets(self, tp, **kwargs):
        if self.misses["left"] > 0:
            self.misses["left"] -= 1
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                            "Failed to get watermark offsets"))
        return self.inner.get_watermark_offsets(tp, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.backends("kafka-confluent")
def test_a_partition_the_client_does_not_know_yet_is_asked_again(make_kafka, monkeypatch):
    """This tests that a confluent reader whose client does not know a topic's partition
    yet (a topic just created, its metadata not yet on the broker asked) asks again and
    reads every entry, and that a partition still unknown after the grace is
    LogNotFound naming the log."""
    make_kafka().open_region(0).append([Record(b"k%d" % i, b"v") for i in range(3)])
    misses = {"left": 3}

    def unknowing(store: KafkaLogStore) -> KafkaLogStore:
        def wrap(reader, _topic):
            reader.consumer = UnknownAtFirst(reader.consumer, misses)
            return reader
        return with_readers(store, wrap)

    region = unknowing(make_kafka()).open_region(0, create=False)
    assert [(e.offset, e.key) for e in region.read(0)] == [(i, b"k%d" % i) for i in range(3)]
    assert misses["left"] == 0, "the reader never met the unknown partition"
    monkeypatch.setattr(reader_module, "NEW_TOPIC_GRACE_S", 0.6)
    misses["left"] = 10**9
    region = unknowing(make_kafka()).open_region(0, create=False)
    start = time.monotonic()
    with pytest.raises(LogNotFound, match="log=region_0"):
        list(region.read(0))
    assert 0.3 < time.monotonic() - start < 5, "not asked again within the grace, or longer"
