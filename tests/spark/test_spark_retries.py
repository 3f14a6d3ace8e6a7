"""Task attempts that fail after writing: their rows are durable but never visible."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from pyspark_durable.endpoint import open_namespace, read_steps

pytestmark = pytest.mark.spark


def entries_of(region, attempt: bytes) -> int:
    """How many entries of ``region`` an attempt whose id starts with ``attempt`` wrote."""
    return sum(1 for e in region.read(region.low_watermark())
               if (e.header("a") or b"").startswith(attempt))


def fail_first_attempt_once_written(wal: str, namespace: str):
    """A UDF that passes ``id`` on as a 1 KB string, except in the first attempt of
    partition 0: at its row 15,000 it waits until the WAL's region 0 holds entries of
    that attempt (written by the sink downstream in the same task), then raises.
    So the failed attempt has always written entries before it fails, however slowly
    the sink's worker started; the 1 KB rows keep every buffer between the UDF and the
    sink flushing, so the rows before 15,000 do reach the sink while the UDF waits."""

    @F.udf(StringType())
    def fail(i: int) -> str:
        import time

        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i >= 15_000:
            ns = open_namespace({"backend": "file", "namespace": namespace,
                                 "options": {"path": wal}})
            region = ns.store.open_region(0)
            deadline = time.monotonic() + 120
            # inline, not entries_of: the worker cannot import this test module
            while (not any((e.header("a") or b"").startswith(b"p0-a0-")
                           for e in region.read(region.low_watermark()))
                   and time.monotonic() < deadline):
                time.sleep(0.02)  # the condition lives in another process's files
            raise RuntimeError("injected task failure after rows were written")
        return str(i).rjust(1000)

    return fail


def test_failed_task_attempt_rows_stay_invisible(spark, tmp_path):
    """This tests that a task attempt that wrote entries and then failed adds no row: the retry does."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        namespace = f"r{uuid.uuid4().hex[:10]}"
        fail = fail_first_attempt_once_written(str(tmp_path / "wal"), namespace)
        df = spark.range(0, 40_000, 1, 2).select(fail("id").alias("id"))
        (df.write.format("durablewal").option("namespace", namespace).mode("append")
         .save(str(tmp_path / "wal")))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    ns = open_namespace({"backend": "file", "namespace": namespace,
                         "options": {"path": str(tmp_path / "wal")}})
    ids = [int(v) for v in read_steps(ns, "default").column("id").to_pylist()]
    assert sorted(ids) == list(range(40_000))
    commit = ns.step_commit(0)
    region = ns.store.open_region(0)
    # the failed attempt's entries are in the log, yet no committed run refers to them
    written = region.high_watermark()
    referenced = sum(r.entries for r in commit.runs)
    assert written > referenced, (written, referenced)
    assert entries_of(region, b"p0-a0-") == written - referenced
    assert len(commit.attempts) == 2
    assert sorted("-".join(a.split("-")[:2]) for a in commit.attempts) == ["p0-a1", "p1-a0"]
