"""A spark-submit job for the standalone-cluster tests: JSON -> durablewal -> parquet.

Usage: spark-submit --master spark://HOST:PORT --py-files ... cluster_job.py
       stream PAIRS_JSON IN_DIR OUT_DIR CHECKPOINT_ROOT [GATE]
       read WAL_OPTIONS_JSON IN_DIR OUT_DIR CHECKPOINT_ROOT

It imports nothing from the test suite: the package arrives with ``--py-files`` (in
mode ``installed`` it is installed where the job runs).
Mode ``stream`` runs, for each pair NAME -> WAL options of PAIRS_JSON (one per backend),
a writer (IN_DIR -> durablewal) and a reader (durablewal -> parquet in OUT_DIR/NAME),
all at once in one application, so that one kill of an executor or of the driver hits
every backend. Each query has a processing-time trigger, one input file and one step
per micro-batch; the job stops them when the input is used up (every writer is idle,
then every reader is).

Prints (flushed) ``BATCH <sink|source>-<NAME> <batch id> <rows>`` after each
micro-batch, ``APP <application id>``, ``DRIVER_MODULE`` / ``EXECUTOR_MODULE`` (where
pyspark_durable was imported from), ``RESULT <json>`` (per pair, a batch read of the
WAL and of the parquet output) and ``DONE``.

GATE (mode ``stream``) is a FIFO the test made and the id of one input row: the first
attempt of the first pair's sink task whose rows hold that id writes the pid of its
executor JVM into the FIFO (which blocks until the test reads it) and then waits, so
that the test kills that executor while the task is surely running, however fast the
backend is. A retry of the task, or a task once the FIFO is gone, passes.

Mode ``read`` (IN_DIR and CHECKPOINT_ROOT unused) is one batch read of the WAL (its
options may hold ``minPartitions``): each row is written to parquet in OUT_DIR with the
Spark partition that read it and the executor JVM it ran under (``executor_of_worker``),
and ``RESULT`` holds the read's partition count.

Mode ``installed`` (``cluster_job.py installed WAL_OPTIONS_JSON OUT_DIR ROWS PARTITIONS``)
runs where pyspark_durable is installed on the driver and the executors, shipped with
nothing and never registered: the job does not import the package (it is imported only
by the other modes), prints ``IMPORTED_BEFORE_WRITE <json bool>`` (whether anything had
imported it into the driver before its first ``format("durablewal")``), writes ROWS rows
made by a DataFrame of PARTITIONS partitions, each tagged with the partition and the
executor of the task that wrote it, with ``df.write.format("durablewal")``, reads them
back with ``spark.read.format("durablewal")`` in a new session into parquet in OUT_DIR,
and prints ``EXECUTOR_MODULE`` and ``RESULT`` (the write's partition count)."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

TRIGGER = "500 milliseconds"
GATE_WAIT_S = 120.0  # a held task waits at most this long for its executor's kill


class Progress(StreamingQueryListener):
    """Prints one line per micro-batch; notices each query's first trigger, and when every
    writer, then every reader, is idle."""

    def __init__(self, pairs: list[str]) -> None:
        self.names: dict[str, str] = {}  # query id -> its name, "<sink|source>-<pair>"
        self.pairs = pairs
        self.lock = threading.Lock()
        self.triggered: dict[str, threading.Event] = {
            f"{role}-{pair}": threading.Event() for role in ("sink", "source") for pair in pairs}
        self.sinks_idle: set[str] = set()
        self.source_idle_counts: dict[str, int] = {}
        self.sources_idle = threading.Event()

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        p = event.progress
        print(f"BATCH {p.name} {p.batchId} {p.numInputRows}", flush=True)
        self.triggered[p.name].set()
        role, pair = p.name.split("-", 1)
        with self.lock:
            if role == "sink":
                self.sinks_idle.discard(pair)
                self.source_idle_counts.clear()
            else:
                self.source_idle_counts.pop(pair, None)

    def onQueryIdle(self, event) -> None:
        name = self.names.get(str(event.id), "")
        if not name:
            return
        self.triggered[name].set()  # (a restart may find nothing new to write)
        role, pair = name.split("-", 1)
        with self.lock:
            if role == "sink":
                self.sinks_idle.add(pair)
            elif self.sinks_idle >= set(self.pairs):
                # two idle triggers after every writer went idle: the second one surely
                # started after the writers' last commits
                self.source_idle_counts[pair] = self.source_idle_counts.get(pair, 0) + 1
                if all(self.source_idle_counts.get(n, 0) >= 2 for n in self.pairs):
                    self.sources_idle.set()

    def onQueryTerminated(self, event) -> None:
        for started in self.triggered.values():
            started.set()
        self.sources_idle.set()


def gated(fifo: str, row_id: int):
    """A mapInArrow function that holds the first attempt of the task holding ``row_id``
    at the gate (see the module's docstring); it runs in the sink's task (same stage)."""

    def gate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        for batch in batches:
            if (context is not None and context.attemptNumber() == 0 and os.path.exists(fifo)
                    and row_id in batch.column("id").to_pylist()):
                with open(fifo, "w") as gate_fifo:  # blocks until the test reads
                    gate_fifo.write(f"{executor_of_worker()[1]}\n")
                threading.Event().wait(GATE_WAIT_S)  # the test kills this executor
            yield batch

    return gate


def writer_query(spark, pair: str, wal: dict, in_dir: str, ckpt: str, gate: str = ""):
    """JSON files -> durablewal, one input file per micro-batch."""
    stream = spark.readStream.schema("id long, payload string").option(
        "maxFilesPerTrigger", 1).json(in_dir)
    if gate:
        fifo, row_id = gate.rsplit(":", 1)
        stream = stream.mapInArrow(gated(fifo, int(row_id)), "id long, payload string")
    return (stream.writeStream.format("durablewal").options(**wal).queryName(f"sink-{pair}")
            .option("checkpointLocation", f"{ckpt}/{pair}/sink")
            .trigger(processingTime=TRIGGER).start())


def reader_query(spark, pair: str, wal: dict, out_dir: str, ckpt: str):
    """durablewal -> parquet, one step per micro-batch."""
    stream = spark.readStream.format("durablewal").options(**wal).option(
        "maxStepsPerTrigger", 1).option("metadataColumns", "_step").load()
    return (stream.select("id", "payload", "_step").writeStream.format("parquet")
            .queryName(f"source-{pair}").option("checkpointLocation", f"{ckpt}/{pair}/source")
            .trigger(processingTime=TRIGGER).start(f"{out_dir}/{pair}"))


def executor_of_worker() -> tuple[str, int, str]:
    """(executor id, pid, work dir) of the executor JVM this Python worker runs under.

    The ancestor process that is a ``CoarseGrainedExecutorBackend`` (above the
    pyspark daemon, if any): its ``--executor-id`` and its working directory, which
    its worker made as ``<worker work dir>/<app id>/<executor id>``. (Both workers run
    on 127.0.0.1, so a host name tells them apart no better than nothing.)"""
    pid = os.getpid()
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv:
            return argv[argv.index("--executor-id") + 1], pid, os.readlink(f"/proc/{pid}/cwd")
    raise RuntimeError(f"no executor JVM above the Python worker {os.getpid()}")


def tag_reader(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Rows as they come out of the scan (or go into a write), tagged with the Spark
    partition and the executor of the task that reads (writes) them (the same stage: no
    shuffle in between)."""
    executor, pid, work_dir = executor_of_worker()
    context = TaskContext.get()
    assert context is not None
    partition = context.partitionId()
    for batch in batches:
        n = batch.num_rows
        yield pa.RecordBatch.from_arrays(
            [batch.column("id"), batch.column("payload"), pa.array([partition] * n, pa.int32()),
             pa.array([executor] * n, pa.string()), pa.array([pid] * n, pa.int64()),
             pa.array([work_dir] * n, pa.string())],
            names=["id", "payload", "partition", "executor", "executor_pid", "work_dir"])


def read_job(spark, wal: dict, out_dir: str) -> dict:
    """One batch read of the WAL, each row written with the partition and executor that
    read it; the read's partitions are its tasks (the parquet write is the same stage)."""
    rows = spark.read.format("durablewal").options(**wal).load().select("id", "payload")
    partitions = rows.rdd.getNumPartitions()
    schema = ("id long, payload string, partition int, executor string, executor_pid long, "
              "work_dir string")
    rows.mapInArrow(tag_reader, schema).write.parquet(out_dir)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # not the driver
    return {"partitions": partitions, "executors": executors}


def installed_job(wal_json: str, out_dir: str, rows: int, partitions: int) -> None:
    """Mode ``installed``: a write and a read of durablewal that never name the package."""
    spark = (SparkSession.builder.appName("durablewal-cluster-installed")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    print(f"APP {sc.applicationId}", flush=True)
    wal = json.loads(wal_json)
    made = spark.range(0, rows, 1, partitions).selectExpr(
        "id", "concat('row-', id, '-', repeat('p', CAST(id % 13 AS INT))) AS payload")
    schema = ("id long, payload string, partition int, executor string, executor_pid long, "
              "work_dir string")
    tagged = made.mapInArrow(tag_reader, schema)  # the same stage (tasks) as the write
    print(f"IMPORTED_BEFORE_WRITE {json.dumps('pyspark_durable' in sys.modules)}", flush=True)
    tagged.write.format("durablewal").options(**wal).mode("append").save()
    fresh = spark.newSession()  # its own data sources: nothing registered in it
    fresh.read.format("durablewal").options(**wal).load().select(
        "id", "payload", "partition", "executor", "work_dir").write.parquet(out_dir)
    files = sc.parallelize(range(2), 2).map(lambda _: __import__("pyspark_durable").__file__)
    print(f"EXECUTOR_MODULE {json.dumps(sorted(set(files.collect())))}", flush=True)
    print(f"RESULT {json.dumps({'partitions': tagged.rdd.getNumPartitions()})}", flush=True)
    print("DONE", flush=True)
    spark.stop()


def check(query) -> None:
    if query.exception() is not None:
        raise SystemExit(f"query {query.name} failed: {query.exception()}")


def main() -> None:
    if sys.argv[1] == "installed":
        wal_json, out_dir, rows, partitions = sys.argv[2:6]
        installed_job(wal_json, out_dir, int(rows), int(partitions))
        return
    import pyspark_durable  # (not at the top: mode installed must not import it)

    mode, wal_json, in_dir, out_dir, ckpt = sys.argv[1:6]
    gate = sys.argv[6] if len(sys.argv) > 6 else ""
    wal = json.loads(wal_json)
    spark = (SparkSession.builder.appName(f"durablewal-cluster-{mode}")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             # the job ends on idle events (Progress): one a second, not Spark's one per 10 s
             .config("spark.sql.streaming.noDataProgressEventInterval", "1s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(spark)
    sc = spark.sparkContext
    print(f"APP {sc.applicationId}", flush=True)
    print(f"DRIVER_MODULE {pyspark_durable.__file__}", flush=True)
    files = sc.parallelize(range(2), 2).map(lambda _: __import__("pyspark_durable").__file__)
    print(f"EXECUTOR_MODULE {sorted(set(files.collect()))}", flush=True)
    if mode == "read":
        print(f"RESULT {json.dumps(read_job(spark, wal, out_dir))}", flush=True)
        print("DONE", flush=True)
        spark.stop()
        return
    if mode != "stream":
        raise SystemExit(f"unknown mode {mode!r}")
    result = stream_job(spark, wal, in_dir, out_dir, ckpt, gate)
    print(f"RESULT {json.dumps(result)}", flush=True)
    print("DONE", flush=True)
    spark.stop()


def stream_job(spark, pairs: dict[str, dict], in_dir: str, out_dir: str, ckpt: str,
               gate: str) -> dict:
    """Mode ``stream``: every pair's writer and reader until the input is used up; then,
    per pair, what a batch read of its WAL and of its parquet output holds."""
    progress = Progress(list(pairs))
    spark.streams.addListener(progress)
    queries = []

    def started(name: str, query) -> None:
        """Wait for ``query``'s first trigger before the next query starts: a query's start
        spawns Python workers on the driver, and Spark gives each a fixed time to connect
        back, which several at once on a loaded machine can miss."""
        progress.names[str(query.id)] = name
        queries.append(query)
        while not progress.triggered[name].wait(timeout=1.0):
            for running in queries:
                check(running)

    # the writers first: the namespaces exist once each has triggered
    for i, (pair, wal) in enumerate(pairs.items()):
        started(f"sink-{pair}", writer_query(spark, pair, wal, in_dir, ckpt,
                                            gate if i == 0 else ""))
    for pair, wal in pairs.items():
        started(f"source-{pair}", reader_query(spark, pair, wal, out_dir, ckpt))
    while not progress.sources_idle.wait(timeout=1.0):
        for query in queries:
            check(query)
    for query in queries:
        query.stop()
        check(query)
    result = {}
    for pair, wal in pairs.items():
        wal_rows = spark.read.format("durablewal").options(**wal).load()
        out_rows = spark.read.parquet(f"{out_dir}/{pair}")  # honours _spark_metadata
        result[pair] = {
            "wal_rows": wal_rows.count(),
            "wal_distinct_ids": wal_rows.select("id").distinct().count(),
            "out_rows": out_rows.count(),
            "out_distinct_ids": out_rows.select("id").distinct().count(),
        }
    return result


if __name__ == "__main__":
    main()
