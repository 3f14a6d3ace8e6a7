"""The child's side of the demo: one Spark session per child process, reporting to
the parent over its stdout, one line per event (``SPARK_READY <seconds>``,
``QUERY <id>``, ``BATCH <batch id> <rows> <ms> <query id>``, ``RESTART <query>`` (a
query whose Python process missed Spark's time to connect back, started again from its
checkpoint), ``WRITTEN``, ``RESULT <json>``, ``DONE``).

The restarted writer also reads the WAL back (:func:`read_wal`) in the same session,
so the demo starts Spark twice, not three times.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

from pyspark_durable.showcase.demo.orders import NAMESPACE


def _say(*parts: object) -> None:
    print(*parts, flush=True)


def _kafka(kafka_json: str | None) -> dict[str, str]:
    """Spark options of the WAL on Kafka (``--kafka-options``), none on the file log."""
    if not kafka_json:
        return {}
    return {"backend": "kafka", **{f"kafka.{k}": v for k, v in json.loads(kafka_json).items()}}


class BatchLines:
    """``BATCH`` lines for the writing query's micro-batches, once each, from its
    progress events; none for the read-back query that may follow in the session."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reported: set[int] = set()
        self.writing = True

    def report(self, p) -> None:
        # A batch without rows commits no step (the WAL only notes the writer's batch
        # id), so it gets no line; every batch with rows is reported exactly once.
        with self.lock:
            if self.writing and p.numInputRows > 0 and p.batchId not in self.reported:
                self.reported.add(p.batchId)
                _say("BATCH", p.batchId, p.numInputRows, p.batchDuration, p.id)

    def listener(self):
        from pyspark.sql.streaming import StreamingQueryListener

        report = self.report

        class Progress(StreamingQueryListener):
            def onQueryStarted(self, event) -> None: ...
            def onQueryIdle(self, event) -> None: ...
            def onQueryTerminated(self, event) -> None: ...

            def onQueryProgress(self, event) -> None:
                report(event.progress)

        return Progress()

    def last(self, progress: list) -> None:
        """The listener is asynchronous: the last batch's event may arrive after the query
        ended (or never, once the process exits). The query's own record of its progress
        is complete when awaitTermination returns; later events are not the writer's."""
        for p in progress:
            self.report(p)
        with self.lock:
            self.writing = False


def run_writer(wal: Path, in_dir: Path, ckpt: Path, kill_inside: int | None = None,
               kafka_json: str | None = None, read_back: list[str] | None = None) -> None:
    """Child: the writing query; prints one ``BATCH`` line per micro-batch with rows.

    ``kill_inside``: SIGKILL this process group (driver, JVM) when the commit of that
    micro-batch is about to be appended, after its tasks wrote their entries (a
    failpoint Spark's Python workers read from the environment they inherit).
    ``read_back`` (out, checkpoint, rows in): once the writing query ended, read the WAL
    back in this session (:func:`read_wal`) rather than start a third Spark.
    """
    started = time.monotonic()
    if kill_inside is not None:
        from pyspark_durable.wal.failpoints import ENV

        os.environ[ENV] = f"commit.checked:kill-group={os.getpgid(0)}:writer_step={kill_inside}"
    from pyspark_durable.showcase.session import local_session
    from pyspark_durable.spark.restarts import await_restarting

    spark = local_session("durablewal-demo-writer")
    _say("SPARK_READY", f"{time.monotonic() - started:.1f}")
    batches = BatchLines()
    spark.streams.addListener(batches.listener())
    schema = ("order_id long, region long, table string, customer string, product string, "
              "amount double")
    orders = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(in_dir))
    kafka = _kafka(kafka_json)

    def start():
        query = (orders.writeStream.format("durablewal").options(**kafka)
                 .option("namespace", NAMESPACE).option("regionColumn", "region")
                 .option("tableColumn", "table").option("checkpointLocation", str(ckpt))
                 .trigger(availableNow=True).start(*([] if kafka else [str(wal)])))
        _say("QUERY", query.id)
        return query

    def restarting(failed) -> None:
        for p in failed.recentProgress:
            batches.report(p)
        _say("RESTART", "writing")

    query = await_restarting(start, on_restart=restarting)
    batches.last(query.recentProgress)
    if read_back:
        _say("WRITTEN")
        out, read_ckpt, rows_in = read_back
        read_wal(spark, wal, Path(out), Path(read_ckpt), int(rows_in), kafka_json)
    spark.stop()
    _say("DONE")


def read_wal(spark, wal: Path, out: Path, ckpt: Path, rows_in: int,
             kafka_json: str | None = None) -> None:
    """A streaming query copies the WAL to parquet; prints what it read (``RESULT``).

    It runs in the restarted writer's session, after its query ended: a query of its
    own, with its own checkpoint, that sees only what the WAL committed."""
    started = time.monotonic()
    from pyspark_durable.spark.restarts import await_restarting

    kafka = _kafka(kafka_json)
    await_restarting(
        lambda: (spark.readStream.format("durablewal").options(**kafka)
                 .option("namespace", NAMESPACE).option("metadataColumns", "_region,_step")
                 .load(*([] if kafka else [str(wal)]))
                 .writeStream.format("parquet").option("checkpointLocation", str(ckpt))
                 .trigger(availableNow=True).start(str(out))),
        on_restart=lambda _: _say("RESTART", "reading"))
    got = spark.read.parquet(str(out)).select("order_id", "_region", "_step").collect()
    counts = Counter(r.order_id for r in got)
    _say("RESULT", json.dumps({
        "rows_out": len(got),
        "duplicates": sum(c - 1 for c in counts.values() if c > 1),
        "lost": sum(1 for i in range(rows_in) if i not in counts),
        "steps": sorted({r._step for r in got}),
        "per_region": sorted(Counter(r._region for r in got).items()),
        "seconds": round(time.monotonic() - started, 1),
    }))
