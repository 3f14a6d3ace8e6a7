"""Filters on the metadata columns pushed into a batch read (spark/pushdown.py) with
Spark's own flag: the steps, regions and tables they exclude are never read."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from test_file_log import frame_index

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace

pytestmark = pytest.mark.spark
FLAG = "spark.sql.python.filterPushdown.enabled"
NS = "pushed"


@pytest.fixture
def damaged(tmp_path):
    """Six steps (table a in regions 0 and 1, table b in region 2), whose entries of
    steps 0 and 1, and every entry of table b, have one flipped byte each: a read that
    touches any of them fails its CRC. Entries are over 1 KiB and segments 1 KiB,
    so each sits in a sealed segment of its own: a damaged frame there fails the read
    that reaches it, not the log's open (which checks the newest segment only)."""
    ns = Namespace(open_store("file", NS, path=str(tmp_path), segment_size_bytes=1024))
    pad = "x" * 2048
    for step in range(6):
        attempt = ns.begin("w", step)
        for table, region in (("a", 0), ("a", 1), ("b", 2)):
            attempt.write(table, pa.table({"id": [step * 10 + region], "pad": [pad]}), region)
        attempt.commit()
    b = ns.table("b").table_id
    victims = [r for s in range(6) for r in ns.step_commit(s).runs
               if s < 2 or r.table_id == b]
    ns.close()
    index = {r: frame_index(tmp_path / NS / f"region_{r}") for r in (0, 1, 2)}  # before damage
    for run in victims:
        for offset in range(run.start, run.end):
            path, end = index[run.region_id][offset]
            with open(path, "r+b") as f:
                f.seek(end - 1)
                byte = f.read(1)[0]
                f.seek(end - 1)
                f.write(bytes([byte ^ 0xFF]))
    return str(tmp_path)


def test_pushed_filters_never_read_the_steps_and_tables_they_exclude(spark, damaged):
    """This tests that with Spark's pushdown flag, `_step > 1 AND _table = 'a'` reads
    only steps 2-5 of table a (the damaged entries outside them are never read, and
    the rows are right), that `_region` and `_commit_timestamp` filters give the rows
    Spark's own filtering gives, and that without the flag the same query reads the
    damaged entries and fails: the pruning, not luck, kept them out."""
    df = spark.read.format("durablewal").option("namespace", NS).load(damaged)
    spark.conf.set(FLAG, "true")
    try:
        got = df.filter("_step > 1 AND _table = 'a'").select("id", "_step", "_region")
        assert sorted(map(tuple, got.collect())) == [
            (s * 10 + r, s, r) for s in range(2, 6) for r in (0, 1)]
        late = df.filter("_step >= 3 AND _region = 1 AND _commit_timestamp > "
                         "timestamp'2000-01-01'").select("id", "_table").collect()
        assert sorted(map(tuple, late)) == [(s * 10 + 1, "a") for s in range(3, 6)]
        assert df.filter("_step > 1 AND _commit_timestamp < timestamp'2000-01-01'").count() == 0
    finally:
        spark.conf.unset(FLAG)
    again = spark.read.format("durablewal").option("namespace", NS).load(damaged)
    with pytest.raises(PySparkException, match="CRC"):
        again.filter("_step > 1 AND _table = 'a'").collect()
