"""A Spark read of a step whose entry was rewritten (with a valid frame CRC on the file
log; re-produced with every Kafka-level check valid on Kafka) fails with the typed
data-loss error naming the step (verified replay)."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from pyspark.errors import PySparkException

from pyspark_durable.log.file import FRAME_HEAD
from tests.helpers import wal_namespace
from tests.log.test_file_log import frames
from tests.spark.spark_io import reader, write

pytestmark = [pytest.mark.spark, pytest.mark.backends("file", "kafka-confluent")]


def rewrite_on_file(wal: dict, region: int, offset: int, flip: bool) -> None:
    """Write the frame of ``region``'s entry at ``offset`` back with a CRC that matches
    its body, as a rewritten or restored copy would; with ``flip``, one byte in the
    middle of its body changed first."""
    for seg in sorted((Path(wal["path"]) / wal["namespace"] / f"region_{region}").glob("*.seg")):
        for pos, end, found in frames(seg)[0]:
            if found != offset:
                continue
            data = bytearray(seg.read_bytes())
            body_at = pos + FRAME_HEAD.size
            data[(body_at + end) // 2] ^= 0x01 if flip else 0
            length, _ = FRAME_HEAD.unpack_from(data, pos)
            FRAME_HEAD.pack_into(data, pos, length, zlib.crc32(bytes(data[body_at:end])))
            seg.write_bytes(bytes(data))
            return
    raise AssertionError(f"no frame for offset {offset}")


def reproduce_on_kafka(wal: dict, region: int, offset: int, flip: bool) -> None:
    """The region's topic deleted and made again, with the same partition count and the
    same topic configs, and its records produced again in order with the same keys,
    headers, values and timestamps; with ``flip``, one byte in the middle of the value
    at ``offset`` changed. Every offset, Kafka CRC and record is then valid: only the
    content differs from what the step committed."""
    bootstrap = wal["kafka.bootstrap.servers"]
    ns = wal_namespace(wal, create=False)
    try:
        entries = list(ns.store.open_region(region, create=False).read(0))
    finally:
        ns.close()
    assert [e.offset for e in entries] == list(range(len(entries)))
    topic = f"{wal['namespace']}_region_{region}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        configs = {k: v["value"] for k, v in described["topic"][topic].items()
                   if v["config_source"] == "DYNAMIC_TOPIC_CONFIG"}
        assert configs["retention.ms"] == "-1"  # the WAL's own topic settings, kept
        partitions = len(admin.describe_topics([topic])[0]["partitions"])
        admin.delete_topics([topic])  # KRaft: gone from the controller when it answers
        admin.create_topics([NewTopic(topic, partitions, -1, topic_configs=configs)])
    finally:
        admin.close()
    delivered: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    for e in entries:
        value = bytearray(e.value)
        if flip and e.offset == offset:
            value[len(value) // 2] ^= 0x01
        producer.produce(topic, bytes(value), e.key, partition=0, headers=list(e.headers),
                         timestamp=e.timestamp_ms,
                         on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert producer.flush(60) == 0
    assert delivered == [(None, e.offset) for e in entries]


def rewrite(wal: dict, region: int, offset: int, flip: bool) -> None:
    (reproduce_on_kafka if wal.get("backend") == "kafka" else rewrite_on_file)(
        wal, region, offset, flip)


def test_spark_read_of_a_rewritten_entry_fails_naming_the_step(spark, wal):
    """This tests that rows written by Spark, whose entry of step 1 is then rewritten
    with one byte changed but every check of the log itself valid (a new frame CRC on
    the file log; on Kafka the topic made again and every record produced again, so
    offsets and Kafka's CRCs are valid), make a batch read fail with ContentMismatch
    naming step 1, while a read of the untouched step 0 returns its rows, and the same
    rewrite without the changed byte (the control, another namespace) reads every row."""
    control = {**wal, "namespace": wal["namespace"] + "c"}
    for opts in (wal, control):
        for step in range(2):
            write(spark.range(step * 10, step * 10 + 10)
                  .selectExpr("id", "repeat(cast(id AS string), 1000) AS text").coalesce(1),
                  opts)
    ns = wal_namespace(wal, create=False)
    victim = ns.step_commit(1).runs[0]
    ns.close()
    rewrite(wal, victim.region_id, victim.start, flip=True)
    rewrite(control, victim.region_id, victim.start, flip=False)

    rows = reader(spark, control).select("id", "text", "_step").collect()
    assert sorted(map(tuple, rows)) == [(i, str(i) * 1000, i // 10) for i in range(20)]
    first = reader(spark, wal, endingStep="1").select("id", "text").collect()
    assert sorted(map(tuple, first)) == [(i, str(i) * 1000) for i in range(10)]
    with pytest.raises(PySparkException, match=r"ContentMismatch.*step 1 committed"):
        reader(spark, wal).collect()
