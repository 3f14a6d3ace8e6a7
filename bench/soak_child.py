"""The Spark application of bench/soak.py, run in the child process it starts
(``python bench/soak.py --child``): the writer and the reader queries, the row counts
it reports while they run, and the check of the output by content at the end.

A process of its own so that the driver JVM's heap is fixed before it starts and the
sampler stays outside what it measures; its WAL settings (:func:`wal_config`) are the
sampler's too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any

NAMESPACE = "soak"
READER_ID = "soak-copy"
READ_SCHEMA = "id long, payload string, _step long"
MAX_RESTARTS = 10
STATUS_EVERY_S = 5.0  # how often the child writes its row counts (progress keeps 100 events)


# -- the Spark application (child process) --------------------------------------------


def payload_expr(col: Any) -> Any:
    """A row's payload as a Spark expression of its id: its content proves which row it is."""
    from pyspark.sql import functions as F

    return F.concat(F.lit("row-"), col.cast("string"), F.lit("-"), F.sha1(col.cast("string")))


def wal_options(run: Path, args: argparse.Namespace) -> dict[str, str]:
    # Small segments, so retention deletes whole files within minutes (the default is
    # 1/64 of the disk, up to 64 MiB: a 10-minute run would never roll one).
    return {"namespace": NAMESPACE, "path": str(run / "wal"),
            "file.segment_size_bytes": str(args.segment_bytes)}


def wal_config(run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The same WAL as ``wal_options``, for the Python API (``open_namespace``)."""
    return {"backend": "file", "namespace": NAMESPACE,
            "options": {"path": str(run / "wal"), "segment_size_bytes": args.segment_bytes}}


def write_json(path: Path, value: dict) -> None:
    """Replace ``path`` whole, so the sampler never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


class RowCounter:
    """Rows of every completed micro-batch of a query, from its recent progress events
    (Spark keeps the last 100, so polling every few seconds misses none)."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.rows: dict[int, int] = {}

    def poll(self) -> None:
        for p in self.query.recentProgress:
            batch, n = int(p["batchId"]), int(p["numInputRows"])
            self.rows[batch] = max(n, self.rows.get(batch, 0))

    def total(self) -> int:
        return sum(self.rows.values())

    def batches(self) -> int:
        return sum(1 for n in self.rows.values() if n)


def verify(spark: Any, run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Read the reader's output back by content against what the writer committed."""
    from pyspark.sql import functions as F

    from pyspark_durable.endpoint import open_namespace, read_steps

    ns = open_namespace(wal_config(run, args), create=False)
    try:
        steps = ns.steps()
        last = read_steps(ns, "default", start=steps.stop - 1) if steps.stop else None
        expected = max(last.column("id").to_pylist()) + 1 if last is not None else 0
    finally:
        ns.close()
    out = spark.read.parquet(str(run / "out"))
    agg = out.agg(F.count("*").alias("rows"), F.countDistinct("id").alias("ids"),
                  F.min("id").alias("lo"), F.max("id").alias("hi"),
                  F.sum(F.when(F.col("payload") == payload_expr(F.col("id")), 0)
                        .otherwise(1)).alias("bad")).first()
    per_step = sorted(tuple(r) for r in out.groupBy("_step").agg(
        F.min("id"), F.max("id"), F.count("*")).collect())
    gaps = [s for s, lo, hi, n in per_step if hi - lo + 1 != n]
    breaks = [b[0] for a, b in itertools.pairwise(per_step) if a[2] + 1 != b[1]]
    rows, ids, lo, hi, bad = agg["rows"], agg["ids"], agg["lo"], agg["hi"], agg["bad"] or 0
    problems = []
    if rows != ids:
        problems.append(f"{rows - ids} rows delivered more than once")
    if ids != expected or (rows and (lo != 0 or hi != expected - 1)):
        problems.append(f"ids {lo}..{hi} ({ids} distinct) instead of 0..{expected - 1}")
    if bad:
        problems.append(f"{bad} payloads do not match their id")
    if [s for s, *_ in per_step] != list(range(steps.stop)):
        problems.append(f"steps read {len(per_step)}, committed [0, {steps.stop})")
    if gaps or breaks:
        problems.append(f"steps without a contiguous id range: {(gaps + breaks)[:10]}")
    if steps.start == 0:
        problems.append("retention expired no step: the hold was never tested")
    return {"ok": not problems, "problems": problems, "rows": rows, "distinct_ids": ids,
            "committed_rows": expected, "steps": [steps.start, steps.stop]}


def one_line(error: str) -> str:
    """A query's failure in one line: Spark's first line and, when a Python traceback
    follows, the exception that ended it."""
    lines = [line for line in error.splitlines() if line.strip()]
    if not lines:
        return error
    raised = [line for line in lines[1:] if re.match(r"[\w.]+: ", line)]
    return lines[0] + (f" ... {raised[-1]}" if raised else "")


def child(args: argparse.Namespace) -> int:
    """The Spark application: both queries until SIGTERM, then the check."""
    from pyspark.sql import functions as F

    import pyspark_durable
    from pyspark_durable.endpoint import open_namespace
    from pyspark_durable.showcase.session import local_session
    from pyspark_durable.spark.restarts import missed_connect_back

    run = Path(args.run_dir)
    status_path, verdict_path = run / "status.json", run / "verdict.json"
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log4j = resources.files("pyspark_durable") / "resources" / "log4j2.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"  # local_session's, kept
    if args.nmt:
        java_opts += " -XX:NativeMemoryTracking=summary"
    spark = local_session("durablewal-soak", **{"spark.driver.memory": args.xmx,
                                                 "spark.driver.extraJavaOptions": java_opts})
    try:
        # Spark's workers must import this checkout's package, as the driver does
        worker_pkg = spark.sparkContext.parallelize([0], 1).map(
            lambda _: __import__("pyspark_durable").__file__).first()
        wal = wal_options(run, args)
        # the namespace exists before the reader starts: a stream read of a namespace
        # that is not there fails as it plans (the writer creates it only at its first
        # commit)
        open_namespace(wal_config(run, args)).close()
        rows = (spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second)
                .option("numPartitions", 2).load()
                .select(F.col("value").alias("id"),
                        payload_expr(F.col("value")).alias("payload")))
        # the reader starts before the table exists, hence its schema
        copy = (spark.readStream.format("durablewal").schema(READ_SCHEMA).options(**wal)
                .option("readerId", READER_ID).option("holdRetention", "true").load())
        starts = {
            "writer": lambda: (
                rows.writeStream.format("durablewal").options(**wal)
                .option("retentionSteps", args.retention_steps)
                .option("cleanIntervalMs", args.clean_interval_ms)
                .option("cleanGraceMs", args.clean_grace_ms)
                .option("checkpointLocation", str(run / "ckpt-writer"))
                .queryName("soak-writer")
                .trigger(processingTime=f"{args.writer_trigger_s} seconds").start()),
            "reader": lambda: (
                copy.writeStream.format("parquet")
                .option("checkpointLocation", str(run / "ckpt-reader"))
                .queryName("soak-reader")
                .trigger(processingTime=f"{args.reader_trigger_s} seconds")
                .start(str(run / "out"))),
        }
        counters = {name: RowCounter(start()) for name, start in starts.items()}
        restarts: list[str] = []
        failed: list[str] = []  # one line per query failure that ends the soak

        def status(phase: str) -> None:
            for c in counters.values():
                c.poll()
            write_json(status_path, {
                "phase": phase, "driver_pid": os.getpid(), "package": pyspark_durable.__file__,
                "worker_package": worker_pkg, "failed": failed, "restarts": restarts,
                **{f"{k}_rows": c.total() for k, c in counters.items()},
                **{f"{k}_batches": c.batches() for k, c in counters.items()}})

        def revive(name: str, error: str) -> bool:
            """Restart a query that failed because one of Spark's Python processes did not
            connect back in its fixed 10 s (a loaded machine): a restart from the
            checkpoint is what a production job does, and exactly-once must survive it.
            Any other failure fails the soak."""
            if missed_connect_back(error) and len(restarts) < MAX_RESTARTS:
                restarts.append(f"{name} at {time.strftime('%H:%M:%S')}")
                counters[name].query = starts[name]()
                return True
            failed.append(f"soak-{name}: {one_line(error)}")
            return False

        status("running")
        while not stop.wait(STATUS_EVERY_S) and not failed:
            for name, c in counters.items():
                if not c.query.isActive:
                    c.poll()  # its last batches, before the query object is replaced
                    revive(name, str(c.query.exception()))
            status("running")
        status("stopping")
        writer = counters["writer"].query
        writer.stop()
        if writer.exception() is not None and not failed:
            failed.append(f"soak-writer: {one_line(str(writer.exception()))}")
        while not failed:  # the reader reads every committed step, the last ones included
            reader = counters["reader"].query
            try:
                if reader.isActive:
                    reader.processAllAvailable()
                    break
                error = str(reader.exception())
            except Exception as exc:  # noqa: BLE001 - a connect-back timeout, or the failure
                error = str(exc)
            counters["reader"].poll()
            revive("reader", error)
        counters["reader"].query.stop()
        status("checking")
        try:
            verdict = verify(spark, run, args)
        except Exception as exc:  # noqa: BLE001 - reported as the verdict, never hidden
            verdict = {"ok": False, "problems": [f"the check failed: {exc}"]}
        if failed:
            verdict["ok"] = False
            verdict["problems"] = failed + verdict["problems"]
        verdict["restarts"] = restarts
        write_json(verdict_path, verdict)
        return 0 if verdict["ok"] else 1
    finally:
        spark.stop()
