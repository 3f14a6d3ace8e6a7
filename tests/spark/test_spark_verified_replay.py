"""A Spark read of a step whose entry was rewritten (with a valid frame CRC) fails with
the typed data-loss error naming the step (issue 28, verified replay)."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from test_verified_replay import rewrite_keeping_crc

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace

pytestmark = pytest.mark.spark


def test_spark_read_of_a_rewritten_entry_fails_naming_the_step(spark, tmp_path):
    """This tests that rows written by Spark, whose entry is then rewritten with a valid
    CRC, make a batch read fail with ContentMismatch naming step 1, while a read of the
    untouched step 0 still returns its rows."""
    for step in range(2):
        spark.range(step * 10, step * 10 + 10).selectExpr("id", "repeat('x', 2000) AS text") \
            .coalesce(1).write.format("durablewal").option("namespace", "verified") \
            .mode("append").save(str(tmp_path))
    ns = Namespace(open_store("file", "verified", path=str(tmp_path)), create=False)
    victim = ns.step_commit(1).runs[0].start
    ns.close()
    rewrite_keeping_crc(tmp_path, victim)
    def reader():  # a DataFrameReader keeps every option set on it: a new one per read
        return spark.read.format("durablewal").option("namespace", "verified")

    assert sorted(r.id for r in reader().option("endingStep", "1").load(str(tmp_path))
                  .collect()) == list(range(10))
    with pytest.raises(PySparkException, match=r"ContentMismatch.*step 1 committed"):
        reader().load(str(tmp_path)).collect()
