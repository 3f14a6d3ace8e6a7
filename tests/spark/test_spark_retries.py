"""Task attempts that fail after writing: their rows are durable but never visible."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from pyspark_durable.endpoint import open_namespace, read_steps

pytestmark = pytest.mark.spark


@F.udf(LongType())
def fail_first_attempt(i: int) -> int:
    """Raise in the first attempt of partition 0 once 15,000 of its rows went by."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i >= 15_000:
        raise RuntimeError("injected task failure after rows were written")
    return i


def test_failed_task_attempt_rows_stay_invisible(spark, tmp_path):
    """This tests that a task attempt that wrote entries and then failed adds no row: the retry does."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        namespace = f"r{uuid.uuid4().hex[:10]}"
        df = spark.range(0, 40_000, 1, 2).select(fail_first_attempt("id").alias("id"))
        (df.write.format("durablewal").option("namespace", namespace).mode("append")
         .save(str(tmp_path / "wal")))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    ns = open_namespace({"backend": "file", "namespace": namespace,
                         "options": {"path": str(tmp_path / "wal")}})
    ids = read_steps(ns, "default").column("id").to_pylist()
    assert sorted(ids) == list(range(40_000))
    commit = ns.step_commit(0)
    region = ns.store.open_region(0)
    # the failed attempt's entries are in the log, yet no committed run refers to them
    written = region.high_watermark()
    referenced = sum(r.entries for r in commit.runs)
    assert written > referenced, (written, referenced)
    assert len(commit.attempts) == 2
    assert sorted("-".join(a.split("-")[:2]) for a in commit.attempts) == ["p0-a1", "p1-a0"]
