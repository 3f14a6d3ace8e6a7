"""The queries bench/spark_pairs.py times: a fresh checkpoint each, run to the end of
what is available (retried when a Python worker fails to connect back), their rows and
durations from their progress events, and the sources and sinks the pairs compare.

Apart from the pairs so that each pair reads as what it compares; ``bench/run.py``
runs them.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import spark_kafka
from common import (
    CpuMeter,
    Target,
    scratch_dir,
)
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from pyspark_durable.spark.restarts import missed_connect_back

ROOT = Path(__file__).resolve().parents[1]


# rate rows get the same ~100-byte shape as the WAL's rows: id + 92-byte payload
PAYLOAD_EXPR = ("cast(concat(lpad(cast(value as string), 20, '0'), repeat('x', 72)) "
                "as binary) as payload")
QUERY_TIMEOUT_S = 1800


class ProgressWaiter(StreamingQueryListener):
    """Counts non-empty micro-batches per query; lets the driver wait without polling."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.batches: dict[str, int] = {}

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        p = event.progress
        if p.numInputRows > 0:
            with self.cond:
                key = str(p.id)
                self.batches[key] = self.batches.get(key, 0) + 1
                self.cond.notify_all()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        with self.cond:
            self.batches[str(event.id)] = 1 << 30
            self.cond.notify_all()

    def wait_batches(self, query: StreamingQuery, n: int, timeout_s: float) -> bool:
        key = str(query.id)
        with self.cond:
            return self.cond.wait_for(lambda: self.batches.get(key, 0) >= n, timeout_s)


def checkpoint() -> str:
    return scratch_dir("ckpt-")


# Spark waits a fixed 10 s for a Python planner process to start and connect back; on a
# machine loaded by other jobs, its imports can take longer, and the query fails first
CONNECT_RETRIES = 5


def run_available_now(df: DataFrame, fmt: str, opts: dict[str, str] | None = None,
                      ckpt: str | None = None) -> tuple[float, float, list]:
    """Run ``df`` → ``fmt`` with trigger(availableNow); (trigger seconds, wall s, progress).

    A query that failed because a Python process of Spark's did not connect back in
    time, before any batch ran, is started again (a fresh checkpoint unless ``ckpt``
    is given, when it fails instead): nothing of it ran, so nothing is counted twice."""
    for attempt in range(CONNECT_RETRIES + 1):
        writer = df.writeStream.format(fmt).options(**(opts or {})) \
            .option("checkpointLocation", ckpt or checkpoint()).trigger(availableNow=True)
        start = time.perf_counter()
        q = writer.start()
        try:
            if not q.awaitTermination(QUERY_TIMEOUT_S):
                q.stop()
                raise TimeoutError(f"query into {fmt} did not finish in {QUERY_TIMEOUT_S}s")
        except StreamingQueryException as exc:
            if not missed_connect_back(exc) or q.recentProgress or ckpt is not None \
                    or attempt == CONNECT_RETRIES:
                raise
            print(f"  (a Python process of Spark's did not connect back in 10 s before the "
                  f"query into {fmt} began: started again)", flush=True)
            continue
        wall = time.perf_counter() - start
        if q.exception():
            raise RuntimeError(str(q.exception()))
        progress = q.recentProgress
        trig = sum(p.durationMs.get("triggerExecution", 0) for p in progress) / 1000
        return trig, wall, progress
    raise AssertionError("unreachable: the last attempt returns or raises")


LAST_DURATIONS: dict[str, dict] = {}


def durations(progress: list) -> dict[str, int]:
    """durationMs of the query's progress events, summed per phase."""
    out: dict[str, int] = {}
    for p in progress:
        for k, v in p.durationMs.items():
            out[k] = out.get(k, 0) + v
    return out


def rows_of(progress: list) -> int:
    return sum(p.numInputRows for p in progress)


def rate_df(spark: SparkSession, rows_per_batch: int) -> DataFrame:
    return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
            .option("numPartitions", 2).load().selectExpr("value as id", PAYLOAD_EXPR))


def wal_df(spark: SparkSession, target: Target, **extra: str) -> DataFrame:
    return spark.readStream.format("durablewal").options(**target.spark_options()) \
        .options(**extra).load()


def rate_fn(spark: SparkSession, n: int, fmt: str,
            opts: Callable[[], dict[str, str]] | None = None) -> Callable[[], float]:
    def run() -> float:
        secs, _, progress = run_available_now(rate_df(spark, n), fmt, opts() if opts else None)
        assert rows_of(progress) == n, (fmt, rows_of(progress), n)
        LAST_DURATIONS[f"rate→{fmt}"] = durations(progress)
        return n / secs
    return run


def floor_df(spark: SparkSession, n: int, **opts: str) -> DataFrame:
    """The Python floor's stream (``columns="payload"``: the payload columns only)."""
    return spark.readStream.format("pyfloor").option("rows", n).options(**opts).load()


@dataclass
class SharedRates:
    """What one run's backends share: the parquet peers, measured once (they do not
    depend on the backend: the first backend run measures them side by side with its
    own rows, later runs reuse them), and each backend's source / sink rates (for the
    goal rows that compare a Kafka client with the file backend of the same run)."""

    parquet_run: str = ""  # label of the backend run that measured the parquet peers
    parquet_source: list[float] = field(default_factory=list)
    parquet_sink: list[float] = field(default_factory=list)
    source: dict[str, list[float]] = field(default_factory=dict)  # label -> rows/s
    sink: dict[str, list[float]] = field(default_factory=dict)
    # the file run's source and sink, run again side by side inside each Kafka run, so
    # a goal row's two sides share the machine's mood (it changes 2x over a long run)
    file_fns: dict[str, Callable[[], float]] = field(default_factory=dict)  # pair -> query
    # label -> pair -> rows/s of the file queries rerun in that Kafka run
    file_beside: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # label -> pair -> (CPU of the Kafka queries, CPU of the file queries beside them)
    cpu: dict[str, dict[str, tuple[CpuMeter, CpuMeter]]] = field(default_factory=dict)
    # Spark's Kafka connector (pair 7), run side by side in each Kafka run's rounds of
    # pairs 1 and 2; None: pair 7 not asked for. Its source topics are prefilled once per
    # broker or cluster: bootstrap -> value form (avro, json) -> topic.
    kafka_peer: spark_kafka.Connector | None = None
    kafka_peer_topics: dict[str, dict[str, str]] = field(default_factory=dict)


def parquet_sink_fn(spark: SparkSession, n: int) -> Callable[[], float]:
    """rate → Spark's parquet file sink (its own checkpoint and output folder), rows/s."""
    def run() -> float:
        folder = scratch_dir("parquet-sink-")
        try:
            secs, _, progress = run_available_now(rate_df(spark, n), "parquet",
                                                  {"path": folder})
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        assert rows_of(progress) == n, ("parquet", rows_of(progress), n)
        LAST_DURATIONS["rate→parquet"] = durations(progress)
        return n / secs
    return run


def beside_file(shared: SharedRates, base: Target, pair: str,
                fns: dict[str, Callable[[], float]]) -> None:
    """The file run keeps its query of ``pair``; a Kafka run reruns it as ``fns["file"]``
    in its own rounds, and meters the CPU of both sides."""
    if base.backend == "file":
        shared.file_fns[pair] = fns["ours"]
    elif pair in shared.file_fns:
        meters = shared.cpu.setdefault(base.label, {})[pair] = (CpuMeter(), CpuMeter())
        fns["ours"] = meters[0].wrap(fns["ours"])
        fns["file"] = meters[1].wrap(_keeping_durations(shared.file_fns[pair]))


def _keeping_durations(fn: Callable[[], float]) -> Callable[[], float]:
    """``fn`` without its durationMs in LAST_DURATIONS: the file query rerun in a Kafka
    run shares its key with the Kafka query, whose durations the run log shows."""
    def run() -> float:
        kept = dict(LAST_DURATIONS)
        value = fn()
        LAST_DURATIONS.clear()
        LAST_DURATIONS.update(kept)
        return value
    return run


def kafka_source_peers(spark: SparkSession, base: Target, n: int, shared: SharedRates,
                       log: Callable[[str], None]) -> dict[str, Callable[[], DataFrame]]:
    """Pair 7's source queries on ``base``'s broker, per value form (Avro first: the
    headline), over topics holding the same ``n`` rows, written once per broker."""
    servers = str(base.bootstrap)
    topics = shared.kafka_peer_topics.get(servers)
    if topics is None:
        topics = shared.kafka_peer_topics[servers] = {}
        for values in ("avro", "json"):
            t0 = time.perf_counter()
            topics[values] = spark_kafka.prefill(spark, servers, n, values, base.replication)
            log(f"  wrote the same {n:,} rows as {values} to a Kafka topic (replication "
                f"{base.replication}) for Spark's Kafka source in "
                f"{time.perf_counter() - t0:.1f}s")
    return {values: (lambda t=topics["avro" if values == "raw" else values], v=values:
                     spark_kafka.source_df(spark, servers, t, v))
            for values in spark_kafka.SOURCE_VALUES}


def with_peer_meters(fns: dict[str, Callable[[], float]]) -> dict[str, CpuMeter]:
    """Meter the CPU (machine, process tree, brokers) of ``ours`` and of each Spark Kafka
    query (``sparkkafka-*``), every round (the goal rows' meter of ``ours``, if any, runs
    inside this one)."""
    meters = {}
    for key in [k for k in fns if k == "ours" or k.startswith("sparkkafka-")]:
        meters[key] = CpuMeter()
        fns[key] = meters[key].wrap(fns[key])
    return meters


def batch_times(progress: list) -> list[float]:
    return [p.durationMs["triggerExecution"] / 1000 for p in progress if p.numInputRows > 0]
