"""Filters on the metadata columns pushed into a batch read (spark/pushdown.py) with
Spark's own flag: the steps, regions and tables they exclude are never read, on the
file log and on Kafka (conftest's ``wal``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from kafka import KafkaAdminClient, TopicPartition
from pyspark.errors import PySparkException

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from tests.helpers import wal_namespace
from tests.log.test_file_log import frame_index
from tests.spark.spark_io import reader

pytestmark = [pytest.mark.spark, pytest.mark.backends("file", "kafka-confluent")]
FLAG = "spark.sql.python.filterPushdown.enabled"
PLACES = (("a", 0), ("a", 1), ("b", 2))  # (table, region) of each step's three entries
# what a read that reaches an excluded entry fails with, per backend (see `excluded`)
UNREADABLE = {"file": "CRC", "kafka": r"OffsetOutOfRange.*below the low watermark"}


def write_six_steps(ns: Namespace) -> list:
    """Six steps, one entry per (table, region) of PLACES each; the runs of steps 0 and
    1 and every run of table b (the entries the test's pushed filters exclude)."""
    pad = "x" * 2048
    for step in range(6):
        attempt = ns.begin("w", step)
        for table, region in PLACES:
            attempt.write(table, pa.table({"id": [step * 10 + region], "pad": [pad]}), region)
        attempt.commit()
    b = ns.tables.lookup("b").table_id
    return [r for s in range(6) for r in ns.step_commit(s).runs if s < 2 or r.table_id == b]


def damage_on_file(wal: dict) -> None:
    """Every excluded entry gets one flipped byte: a read that touches any of them fails
    its CRC. Entries are over 1 KiB and segments 1 KiB, so each sits in a sealed
    segment of its own: a damaged frame there fails the read that reaches it, not the
    log's open (which checks the newest segment only)."""
    ns = Namespace(open_store("file", wal["namespace"], path=wal["path"],
                              segment_size_bytes=1024))
    victims = write_six_steps(ns)
    ns.close()
    folder = Path(wal["path"]) / wal["namespace"]
    index = {r: frame_index(folder / f"region_{r}") for _, r in PLACES}  # before damage
    for run in victims:
        for offset in range(run.start, run.end):
            path, end = index[run.region_id][offset]
            with open(path, "r+b") as f:
                f.seek(end - 1)
                byte = f.read(1)[0]
                f.seek(end - 1)
                f.write(bytes([byte ^ 0xFF]))


def delete_on_kafka(wal: dict) -> None:
    """A Kafka record cannot be damaged in place, so every excluded entry is made
    unreadable instead: the broker's DeleteRecords moves each region topic's log start
    past them (regions 0 and 1 to their first entry of step 2; region 2, table b's
    only region, to its end). The WAL was not told (its logical low watermarks stay
    0, its step commits still name those offsets), so a read that reaches any of them
    asks for offsets below the broker's log start and fails with OffsetOutOfRange;
    no read can skip them silently."""
    ns = wal_namespace(wal)
    victims = write_six_steps(ns)
    cut: dict[int, int] = {}
    for run in victims:  # the excluded entries are a prefix of each region: checked
        cut[run.region_id] = max(cut.get(run.region_id, 0), run.end)
    kept = [r for s in range(6) for r in ns.step_commit(s).runs if r not in victims]
    assert all(r.start >= cut.get(r.region_id, 0) for r in kept)
    assert cut[2] == ns.store.open_region(2).high_watermark()  # region 2: all of it
    ns.close()
    admin = KafkaAdminClient(bootstrap_servers=wal["kafka.bootstrap.servers"])
    try:
        admin.delete_records({TopicPartition(f"{wal['namespace']}_region_{r}", 0): offset
                              for r, offset in cut.items()})
    finally:
        admin.close()
    ns = wal_namespace(wal, create=False)
    try:
        assert [ns.store.open_region(r, create=False).low_watermark() for r in sorted(cut)] \
            == [cut[r] for r in sorted(cut)]
    finally:
        ns.close()


@pytest.fixture
def excluded(wal: dict) -> dict:
    """Six steps (table a in regions 0 and 1, table b in region 2) whose entries of
    steps 0 and 1, and every entry of table b, cannot be read: damaged on the file
    log, deleted below the broker's log start on Kafka."""
    (delete_on_kafka if wal.get("backend") == "kafka" else damage_on_file)(wal)
    return wal


def test_pushed_filters_never_read_the_steps_and_tables_they_exclude(spark, excluded):
    """This tests that with Spark's pushdown flag, `_step > 1 AND _table = 'a'` reads
    only steps 2-5 of table a (the unreadable entries outside them are never read, and
    the rows are right), that `_region` and `_commit_timestamp` filters give the rows
    Spark's own filtering gives, and that without the flag the same query reads the
    unreadable entries and fails: the pruning, not luck, kept them out.

    Why unreadable entries rather than a count of reads: the reads happen in Spark's
    Python workers, which a test cannot instrument; an entry that fails any read of it
    (a CRC on the file log, a record below the log start on Kafka, where a record
    cannot be rewritten in place) counts the reads of it exactly: zero, or a failure."""
    backend = excluded.get("backend", "file")
    spark.conf.set(FLAG, "true")
    try:
        df = reader(spark, excluded)
        got = df.filter("_step > 1 AND _table = 'a'").select("id", "_step", "_region")
        assert sorted(map(tuple, got.collect())) == [
            (s * 10 + r, s, r) for s in range(2, 6) for r in (0, 1)]
        late = df.filter("_step >= 3 AND _region = 1 AND _commit_timestamp > "
                         "timestamp'2000-01-01'").select("id", "_table").collect()
        assert sorted(map(tuple, late)) == [(s * 10 + 1, "a") for s in range(3, 6)]
        assert df.filter("_step > 1 AND _commit_timestamp < timestamp'2000-01-01'").count() == 0
    finally:
        spark.conf.unset(FLAG)
    with pytest.raises(PySparkException, match=UNREADABLE[backend]):
        reader(spark, excluded).filter("_step > 1 AND _table = 'a'").collect()
